#!/bin/sh
# SPDX-License-Identifier: MIT
# The shared library exports only qs_ symbols: every defined dynamic symbol must
# carry the prefix, and the core API must be there. Usage: check_exports.sh NM LIBRARY
set -eu
nm_tool=$1
lib=$2
syms=$("$nm_tool" -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}')
count=$(printf '%s\n' "$syms" | grep -c . || true)
bad=$(printf '%s\n' "$syms" | grep -v '^qs_' | grep -v '^_init$' | grep -v '^_fini$' || true)
if [ -n "$bad" ]; then
    echo "exported symbols without the qs_ prefix:"
    echo "$bad"
    exit 1
fi
for need in qs_ctx_create qs_quantize qs_dequantize qs_status_str qs_api_version; do
    printf '%s\n' "$syms" | grep -qx "$need" || { echo "missing export: $need"; exit 1; }
done
leaked=$(printf '%s\n' "$syms" | grep -E '__(ref|avx2|avx512|neon)' || true)
if [ -n "$leaked" ]; then
    echo "kernel symbols must stay hidden:"
    echo "$leaked"
    exit 1
fi
echo "1 passed, 0 failed: $count exported symbols, all qs_-prefixed, no kernel exported"
