/* SPDX-License-Identifier: MIT */
/*
 * Struct layouts for bindings: the size of each public struct and the offset of each of its
 * fields, by name, so that a binding that mirrors them (python/qsparse/_capi.py) can check its
 * mirror against the compiled library when it loads, instead of trusting a copy.
 */
#include <stddef.h>
#include <string.h>

#include "internal.h"
#include "qsparse/profile.h"
#include "qsparse/recommend.h"

struct field {
    const char *name;
    int64_t offset;
};

#define F(type, member) {#member, (int64_t)offsetof(type, member)}

static const struct field allocator_fields[] = {
    F(qs_allocator, alloc), F(qs_allocator, free), F(qs_allocator, user), {NULL, 0}};
static const struct field ctx_params_fields[] = {
    F(qs_ctx_params, num_threads), F(qs_ctx_params, backend),   F(qs_ctx_params, isa_mask),
    F(qs_ctx_params, nonfinite),   F(qs_ctx_params, allocator), F(qs_ctx_params, reserved),
    {NULL, 0}};
static const struct field quant_params_fields[] = {
    F(qs_quant_params, format),         F(qs_quant_params, block_size),
    F(qs_quant_params, granularity),    F(qs_quant_params, symmetric),
    F(qs_quant_params, double_quant),   F(qs_quant_params, scale_rounding),
    F(qs_quant_params, scale),          F(qs_quant_params, reserved0),
    F(qs_quant_params, reserved),       {NULL, 0}};
static const struct field qtensor_fields[] = {
    F(qs_qtensor, data),          F(qs_qtensor, data_bytes),       F(qs_qtensor, scale),
    F(qs_qtensor, scale_bytes),   F(qs_qtensor, zero_point),       F(qs_qtensor, zero_point_bytes),
    F(qs_qtensor, nested_scale),  F(qs_qtensor, nested_scale_bytes), F(qs_qtensor, global_scale),
    F(qs_qtensor, nested_offset), F(qs_qtensor, reserved),         {NULL, 0}};
static const struct field plane_info_fields[] = {
    F(qs_plane_info, elem),   F(qs_plane_info, bits),  F(qs_plane_info, ndim),
    F(qs_plane_info, reserved0), F(qs_plane_info, shape), F(qs_plane_info, values),
    F(qs_plane_info, bytes),  F(qs_plane_info, reserved), {NULL, 0}};
static const struct field format_info_fields[] = {
    F(qs_format_info, name),      F(qs_format_info, bits),   F(qs_format_info, block_size),
    F(qs_format_info, block_min), F(qs_format_info, block_max), F(qs_format_info, blocks),
    F(qs_format_info, options),   F(qs_format_info, global_scale), F(qs_format_info, reserved0),
    F(qs_format_info, reserved), {NULL, 0}};
static const struct field observer_params_fields[] = {
    F(qs_observer_params, method),       F(qs_observer_params, axis),
    F(qs_observer_params, num_bins),     F(qs_observer_params, num_levels),
    F(qs_observer_params, start_bin),    F(qs_observer_params, target),
    F(qs_observer_params, averaging_constant), F(qs_observer_params, reserved0),
    F(qs_observer_params, percentile),   F(qs_observer_params, reserved),
    {NULL, 0}};

static const struct field isa_tier_fields[] = {
    F(qs_isa_tier, name),      F(qs_isa_tier, arch),     F(qs_isa_tier, required),
    F(qs_isa_tier, allowed),   F(qs_isa_tier, available), F(qs_isa_tier, reserved),
    {NULL, 0}};

static const struct field matmul_params_fields[] = {
    F(qs_matmul_params, activations), F(qs_matmul_params, threshold), F(qs_matmul_params, reserved),
    {NULL, 0}};
static const struct field weight_fields[] = {
    F(qs_weight, kind),       F(qs_weight, dtype), F(qs_weight, data),  F(qs_weight, data_bytes),
    F(qs_weight, meta),       F(qs_weight, meta_count), F(qs_weight, quant), F(qs_weight, q),
    F(qs_weight, reserved),   {NULL, 0}};

static const struct field profile_entry_fields[] = {
    F(qs_profile_entry, op),       F(qs_profile_entry, kernel),    F(qs_profile_entry, isa),
    F(qs_profile_entry, format),   F(qs_profile_entry, threads),   F(qs_profile_entry, calls),
    F(qs_profile_entry, elements), F(qs_profile_entry, bytes_in),  F(qs_profile_entry, bytes_out),
    F(qs_profile_entry, ns),       F(qs_profile_entry, reserved),  {NULL, 0}};

static const struct field recommend_params_fields[] = {
    F(qs_recommend_params, objective), F(qs_recommend_params, max_error),
    F(qs_recommend_params, sparse24),  F(qs_recommend_params, gemm_rows),
    F(qs_recommend_params, probe_seconds), F(qs_recommend_params, reserved), {NULL, 0}};
static const struct field candidate_fields[] = {
    F(qs_candidate, label),           F(qs_candidate, format),
    F(qs_candidate, sparse24),        F(qs_candidate, int8_activations),
    F(qs_candidate, within_error),    F(qs_candidate, bits_per_weight),
    F(qs_candidate, bytes),           F(qs_candidate, error),
    F(qs_candidate, gemv_speedup),    F(qs_candidate, gemv_speedup_mt),
    F(qs_candidate, gemm_speedup),    F(qs_candidate, kernel),
    F(qs_candidate, slow),            F(qs_candidate, rank),
    F(qs_candidate, reason),          F(qs_candidate, reserved), {NULL, 0}};
/* qsparse/gptq.h */
static const struct field gptq_params_fields[] = {
    F(qs_gptq_params, percdamp),      F(qs_gptq_params, block_size), F(qs_gptq_params, act_order),
    F(qs_gptq_params, static_groups), F(qs_gptq_params, scale_search), F(qs_gptq_params, reserved),
    {NULL, 0}};
static const struct field sparsegpt_params_fields[] = {
    F(qs_sparsegpt_params, percdamp), F(qs_sparsegpt_params, density),
    F(qs_sparsegpt_params, block_size), F(qs_sparsegpt_params, n), F(qs_sparsegpt_params, m),
    F(qs_sparsegpt_params, reserved0), F(qs_sparsegpt_params, reserved), {NULL, 0}};

#undef F

static const struct {
    int64_t size;
    const struct field *fields;
} structs[] = {
    [QS_STRUCT_ALLOCATOR] = {sizeof(qs_allocator), allocator_fields},
    [QS_STRUCT_CTX_PARAMS] = {sizeof(qs_ctx_params), ctx_params_fields},
    [QS_STRUCT_QUANT_PARAMS] = {sizeof(qs_quant_params), quant_params_fields},
    [QS_STRUCT_QTENSOR] = {sizeof(qs_qtensor), qtensor_fields},
    [QS_STRUCT_PLANE_INFO] = {sizeof(qs_plane_info), plane_info_fields},
    [QS_STRUCT_FORMAT_INFO] = {sizeof(qs_format_info), format_info_fields},
    [QS_STRUCT_OBSERVER_PARAMS] = {sizeof(qs_observer_params), observer_params_fields},
    [QS_STRUCT_ISA_TIER] = {sizeof(qs_isa_tier), isa_tier_fields},
    [QS_STRUCT_MATMUL_PARAMS] = {sizeof(qs_matmul_params), matmul_params_fields},
    [QS_STRUCT_WEIGHT] = {sizeof(qs_weight), weight_fields},
    [QS_STRUCT_PROFILE_ENTRY] = {sizeof(qs_profile_entry), profile_entry_fields},
    [QS_STRUCT_RECOMMEND_PARAMS] = {sizeof(qs_recommend_params), recommend_params_fields},
    [QS_STRUCT_CANDIDATE] = {sizeof(qs_candidate), candidate_fields},
    [QS_STRUCT_GPTQ_PARAMS] = {sizeof(qs_gptq_params), gptq_params_fields},
    [QS_STRUCT_SPARSEGPT_PARAMS] = {sizeof(qs_sparsegpt_params), sparsegpt_params_fields},
};

#define STRUCT_MAX ((int32_t)(sizeof structs / sizeof structs[0]) - 1)

QS_API int64_t qs_struct_size(int32_t kind)
{
    return kind >= 1 && kind <= STRUCT_MAX ? structs[kind].size : -1;
}

QS_API int64_t qs_struct_offset(int32_t kind, const char *field)
{
    if (kind < 1 || kind > STRUCT_MAX || !field)
        return -1;
    for (const struct field *f = structs[kind].fields; f->name; f++)
        if (strcmp(f->name, field) == 0)
            return f->offset;
    return -1;
}
