// SPDX-License-Identifier: MIT
// The public header compiles on its own as C++ and links through extern "C".
#include "qsparse.h"

int main()
{
    qs_ctx *ctx = nullptr;
    if (qs_ctx_create(nullptr, &ctx) != QS_OK)
        return 1;
    qs_ctx_destroy(ctx);
    return qs_api_version() == QS_API_VERSION ? 0 : 1;
}
