/* SPDX-License-Identifier: MIT */
/* The public headers compile on their own as strict C99: nothing else is included. The plugin
 * ABI comes first, so that it is seen to stand alone as a plugin includes it. */
#include "qsparse/plugin.h"
#include "qsparse.h"
#include "qsparse/calib.h"
#include "qsparse/cuda.h"
#include "qsparse/matmul.h"
#include "qsparse/profile.h"
#include "qsparse/sparse.h"

int main(void)
{
    return qs_version_number() == QS_VERSION_MAJOR * 10000 + QS_VERSION_MINOR * 100 +
                                      QS_VERSION_PATCH && qs_api_version() == QS_API_VERSION
               ? 0 : 1;
}
