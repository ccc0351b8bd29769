/* SPDX-License-Identifier: MIT */
/* Version, status strings and dtype names: the constants ctypes cannot see as macros. */
#include <string.h>

#include "internal.h"

QS_API const char *qs_version_string(void)
{
    return QS_VERSION_STRING;
}

QS_API int32_t qs_version_number(void)
{
    return QS_VERSION_MAJOR * 10000 + QS_VERSION_MINOR * 100 + QS_VERSION_PATCH;
}

QS_API int32_t qs_api_version(void)
{
    return QS_API_VERSION;
}

QS_API const char *qs_status_str(qs_status status)
{
    switch (status) {
    case QS_OK: return "QS_OK: success";
    case QS_ERR_INVALID_ARG: return "QS_ERR_INVALID_ARG: invalid argument";
    case QS_ERR_BUFFER_TOO_SMALL: return "QS_ERR_BUFFER_TOO_SMALL: output buffer too small";
    case QS_ERR_OVERFLOW: return "QS_ERR_OVERFLOW: size overflows int64";
    case QS_ERR_UNSUPPORTED: return "QS_ERR_UNSUPPORTED: not supported";
    case QS_ERR_NONFINITE: return "QS_ERR_NONFINITE: NaN or Inf in the input";
    case QS_ERR_OUT_OF_MEMORY: return "QS_ERR_OUT_OF_MEMORY: allocation failed";
    case QS_ERR_BAD_DATA: return "QS_ERR_BAD_DATA: corrupt input data";
    case QS_ERR_SHAPE: return "QS_ERR_SHAPE: shape does not fit the format";
    case QS_ERR_BACKEND: return "QS_ERR_BACKEND: backend not available";
    default: return "unknown qs_status";
    }
}

QS_API int32_t qs_dtype_size(int32_t dtype)
{
    switch (dtype) {
    case QS_DTYPE_F32: return 4;
    case QS_DTYPE_F16:
    case QS_DTYPE_BF16: return 2;
    default: return 0;
    }
}

QS_API const char *qs_dtype_name(int32_t dtype)
{
    switch (dtype) {
    case QS_DTYPE_F32: return "float32";
    case QS_DTYPE_F16: return "float16";
    case QS_DTYPE_BF16: return "bfloat16";
    default: return NULL;
    }
}

QS_API int32_t qs_dtype_from_name(const char *name)
{
    static const struct {
        const char *name;
        int32_t dtype;
    } names[] = {
        {"float32", QS_DTYPE_F32}, {"f32", QS_DTYPE_F32},   {"float16", QS_DTYPE_F16},
        {"f16", QS_DTYPE_F16},     {"bfloat16", QS_DTYPE_BF16}, {"bf16", QS_DTYPE_BF16},
    };

    if (!name)
        return -1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0)
            return names[i].dtype;
    return -1;
}
