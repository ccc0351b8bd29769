/* SPDX-License-Identifier: MIT */
/*
 * A program with the library linked into it (statically, as the Python package's qsparse tool
 * has), for plugin_search.sh: asks for the CUDA backend once and prints "AVAILABLE MESSAGE",
 * e.g. "0 backend plugin /usr/bin/libqsparse-cuda.so: no such file".
 */
#include <stdio.h>

#include "qsparse.h"

int main(void)
{
    int32_t available = qs_backend_available(QS_BACKEND_CUDA);

    printf("%d %s\n", (int)available, qs_backend_message(QS_BACKEND_CUDA));
    return 0;
}
