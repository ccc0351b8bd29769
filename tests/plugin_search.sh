#!/bin/bash
# SPDX-License-Identifier: MIT
# Where the plugin search looks, seen from a program with the library linked in statically
# (plugin_probe.c), started as a user starts a tool: by name from PATH, inside a downloaded model
# folder that holds a planted libqsparse-cuda.so (tests/plugins/test_plugin.c, PLANTED: its code
# leaves a marker file the moment dlopen maps it).
# Usage: plugin_search.sh PROBE PLANTED_PLUGIN GOOD_PLUGIN
set -eu
probe=$1
planted=$2
good=$3

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tmp=$(cd "$tmp" && pwd -P) # /proc/self/exe gives the physical path
mkdir "$tmp/bin" "$tmp/model" "$tmp/libs"
cp "$probe" "$tmp/bin/qs-plugin-probe"
cp "$planted" "$tmp/model/libqsparse-cuda.so"
export QS_TEST_PLANTED_MARKER="$tmp/planted-ran"
unset QS_PLUGIN_PATH || true
fails=0

# expect NAME WANT OUT: the probe printed WANT and the planted code did not run
expect() {
    if [ "$3" != "$2" ]; then
        echo "FAIL $1: got '$3', want '$2'"
        fails=$((fails + 1))
    fi
    if [ -e "$QS_TEST_PLANTED_MARKER" ]; then
        echo "FAIL $1: the planted plugin's code ran"
        rm -f "$QS_TEST_PLANTED_MARKER"
        fails=$((fails + 1))
    fi
}

beside="0 backend plugin $tmp/bin/libqsparse-cuda.so: no such file"

# 1. `qs-plugin-probe` from PATH inside the folder: dladdr names the program as typed, without
#    a directory; the search must look beside the program, not in ".".
out=$(cd "$tmp/model" && PATH="$tmp/bin:$PATH" qs-plugin-probe)
expect "started from PATH" "$beside" "$out"

# 2. The same by a relative path, and with an argv[0] that names the folder (the starting process
#    chooses argv[0]; only /proc/self/exe says where the program is).
out=$(cd "$tmp/model" && "../bin/qs-plugin-probe")
expect "started as ../bin/qs-plugin-probe" "$beside" "$out"
out=$(cd "$tmp/model" && exec -a "$tmp/model/qs-plugin-probe" "$tmp/bin/qs-plugin-probe")
expect "argv[0] naming the folder" "$beside" "$out"

# 3. A relative QS_PLUGIN_PATH is the file in the current directory, checked and loaded at one
#    absolute path; dlopen must not find a file of that name on the library search path.
cp "$good" "$tmp/model/plugin.so"
cp "$planted" "$tmp/libs/plugin.so"
out=$(cd "$tmp/model" && QS_PLUGIN_PATH=plugin.so LD_LIBRARY_PATH="$tmp/libs" "$tmp/bin/qs-plugin-probe")
expect "relative QS_PLUGIN_PATH" "1 " "$out"
rm "$tmp/model/plugin.so"
out=$(cd "$tmp/model" && QS_PLUGIN_PATH=plugin.so LD_LIBRARY_PATH="$tmp/libs" "$tmp/bin/qs-plugin-probe")
expect "relative QS_PLUGIN_PATH, no such file" \
    "0 backend plugin $tmp/model/plugin.so: no such file" "$out"

# 4. The search itself works: a plugin beside the program is loaded (and here the planted code
#    runs, which shows the marker would have caught it above).
cp "$good" "$tmp/bin/libqsparse-cuda.so"
out=$(cd "$tmp/model" && PATH="$tmp/bin:$PATH" qs-plugin-probe)
expect "beside the program" "1 " "$out"
cp "$planted" "$tmp/bin/libqsparse-cuda.so"
out=$(cd "$tmp/model" && PATH="$tmp/bin:$PATH" qs-plugin-probe)
if [ "$out" != "1 " ] || [ ! -e "$QS_TEST_PLANTED_MARKER" ]; then
    echo "FAIL control: a plugin beside the program was not loaded ('$out')"
    fails=$((fails + 1))
fi

[ "$fails" -eq 0 ] && echo "plugin search: all cases pass"
exit "$fails"
