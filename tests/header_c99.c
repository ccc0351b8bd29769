/* SPDX-License-Identifier: MIT */
/* The public header compiles on its own as strict C99: nothing else is included. */
#include "qsparse.h"

int main(void)
{
    return qs_version_number() == QS_VERSION_MAJOR * 10000 + QS_VERSION_MINOR * 100 +
                                      QS_VERSION_PATCH && qs_api_version() == QS_API_VERSION
               ? 0 : 1;
}
