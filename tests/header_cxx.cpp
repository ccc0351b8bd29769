// SPDX-License-Identifier: MIT
// The public headers compile on their own as C++ and link through extern "C".
#include "qsparse.h"
#include "qsparse/calib.h"
#include "qsparse/cuda.h"
#include "qsparse/matmul.h"
#include "qsparse/plugin.h"
#include "qsparse/profile.h"
#include "qsparse/sparse.h"

int main()
{
    qs_ctx *ctx = nullptr;
    if (qs_ctx_create(nullptr, &ctx) != QS_OK)
        return 1;
    qs_ctx_set(ctx, QS_PARAM_PROFILE, 1);
    int64_t n = qs_profile_count(ctx);
    qs_ctx_destroy(ctx);
    return n == 0 && qs_api_version() == QS_API_VERSION ? 0 : 1;
}
