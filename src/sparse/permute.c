/* SPDX-License-Identifier: MIT */
/*
 * Channel permutation search for 2:4 (docs/sparsity.md §6.5, the stripe-group idea of Pool & Yu,
 * "Channel Permutations for N:M Sparsity"): columns are regrouped so that 2:4 STRIP pruning keeps
 * more score. A stripe is one group of 4 columns; for a pair of stripes every way to split their
 * 8 columns into two groups of 4 (35 splits) is scored and the best one applied, over all pairs,
 * sweep after sweep, until nothing improves; then seeded random "escape" moves that may lose are
 * taken and the local search resumes, the best permutation seen being returned. The search is
 * sequential, so its result depends only on the input and the seed. It is an offline utility:
 * kernels never see permutations.
 */
#include <math.h>
#include <string.h>

#include "sparse_internal.h"

/* The 35 splits of 8 columns into two groups of 4: group A holds column 0 and the three columns
 * whose bits are set (bits 1..7), in lexicographic order, so split 0 is the identity {0,1,2,3}. */
static int make_splits(uint8_t splits[35])
{
    int k = 0;
    for (int a = 1; a < 8; a++)
        for (int b = a + 1; b < 8; b++)
            for (int c = b + 1; c < 8; c++)
                splits[k++] = (uint8_t)(1u | 1u << a | 1u << b | 1u << c);
    return k;
}

/* Sum of the two largest of four non-negative finite scores. */
static float top2(float x0, float x1, float x2, float x3)
{
    float a = x0 > x1 ? x0 : x1, b = x0 > x1 ? x1 : x0;
    float c = x2 > x3 ? x2 : x3, d = x2 > x3 ? x3 : x2;
    float hi = a > c ? a : c, lo = a > c ? c : a, lo2 = b > d ? b : d;
    return hi + (lo > lo2 ? lo : lo2);
}

struct perm_state {
    const float *cs; /* column-major scores: cs[col * rows + r] */
    int64_t rows, stripes;
    int32_t *perm;   /* position -> original column */
    double *sv;      /* kept score of each stripe */
    uint8_t splits[35];
};

/* Kept score of one group of 4 columns over all rows: per-row top-2 sums added into four double
 * accumulators by row % 4, combined in a fixed order (independent of threads and ISA; the four
 * chains also keep the additions from serialising on one register). */
static double group_sum(const float *c0, const float *c1, const float *c2, const float *c3,
                        int64_t rows)
{
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4)
        for (int j = 0; j < 4; j++)
            acc[j] += (double)top2(c0[r + j], c1[r + j], c2[r + j], c3[r + j]);
    for (; r < rows; r++)
        acc[r % 4] += (double)top2(c0[r], c1[r], c2[r], c3[r]);
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

static double stripe_value(const struct perm_state *p, const int32_t c[4])
{
    return group_sum(p->cs + (int64_t)c[0] * p->rows, p->cs + (int64_t)c[1] * p->rows,
                     p->cs + (int64_t)c[2] * p->rows, p->cs + (int64_t)c[3] * p->rows, p->rows);
}

/* Score of every split of stripes s1, s2 into sa[k] (group A) and sb[k] (group B). */
static void score_splits(const struct perm_state *p, int64_t s1, int64_t s2, double sa[35],
                         double sb[35])
{
    const float *col[8];
    for (int i = 0; i < 4; i++) {
        col[i] = p->cs + (int64_t)p->perm[4 * s1 + i] * p->rows;
        col[4 + i] = p->cs + (int64_t)p->perm[4 * s2 + i] * p->rows;
    }
    for (int k = 0; k < 35; k++) {
        const float *a[4], *b[4];
        int na = 0, nb = 0;
        for (int i = 0; i < 8; i++) {
            if ((p->splits[k] >> i) & 1u)
                a[na++] = col[i];
            else
                b[nb++] = col[i];
        }
        sa[k] = group_sum(a[0], a[1], a[2], a[3], p->rows);
        sb[k] = group_sum(b[0], b[1], b[2], b[3], p->rows);
    }
}

static void apply_split(struct perm_state *p, int64_t s1, int64_t s2, int k, double va, double vb)
{
    int32_t cols[8], a[4], b[4];
    int na = 0, nb = 0;

    for (int i = 0; i < 4; i++) {
        cols[i] = p->perm[4 * s1 + i];
        cols[4 + i] = p->perm[4 * s2 + i];
    }
    for (int i = 0; i < 8; i++) {
        if ((p->splits[k] >> i) & 1u)
            a[na++] = cols[i];
        else
            b[nb++] = cols[i];
    }
    memcpy(p->perm + 4 * s1, a, sizeof a);
    memcpy(p->perm + 4 * s2, b, sizeof b);
    p->sv[s1] = va;
    p->sv[s2] = vb;
}

/* One sweep over all stripe pairs, applying every strict improvement at once; returns 1 if any
 * move was made. The relative threshold keeps rounding noise from cycling. */
static int sweep(struct perm_state *p)
{
    double sa[35], sb[35];
    int moved = 0;

    for (int64_t s1 = 0; s1 < p->stripes; s1++)
        for (int64_t s2 = s1 + 1; s2 < p->stripes; s2++) {
            double base = p->sv[s1] + p->sv[s2], best = base;
            int kbest = -1;
            score_splits(p, s1, s2, sa, sb);
            for (int k = 1; k < 35; k++)
                if (sa[k] + sb[k] > best + 1e-12 * (best > 1.0 ? best : 1.0)) {
                    best = sa[k] + sb[k];
                    kbest = k;
                }
            if (kbest > 0) {
                apply_split(p, s1, s2, kbest, sa[kbest], sb[kbest]);
                moved = 1;
            }
        }
    return moved;
}

static double total(const struct perm_state *p)
{
    double t = 0.0;
    for (int64_t s = 0; s < p->stripes; s++)
        t += p->sv[s];
    return t;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static qs_status check_permute(qs_ctx *ctx, const float *w, int64_t rows, int64_t cols,
                               const float *norms, const int32_t *perm, int64_t perm_count,
                               int64_t *n)
{
    qs_status st;

    if ((st = qs_sp_check_shape(ctx, rows, cols, n)) != QS_OK)
        return st;
    if (cols % 4 != 0)
        return qs_fail(ctx, QS_ERR_SHAPE, "cols = %lld is not a multiple of 4", (long long)cols);
    if (cols > INT32_MAX)
        return qs_fail(ctx, QS_ERR_SHAPE, "cols = %lld does not fit an int32 permutation",
                       (long long)cols);
    if ((*n > 0 && !w) || (cols > 0 && !perm))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s is NULL", perm ? "w" : "perm");
    if (norms && (st = qs_sp_check_norms(ctx, norms, cols)) != QS_OK)
        return st;
    return qs_sp_check_capacity(ctx, "perm", perm_count, cols);
}

QS_API qs_status qs_sp24_permute_search(qs_ctx *ctx, const float *w, int64_t rows, int64_t cols,
                                        const float *norms, int32_t max_sweeps, int32_t escapes,
                                        uint64_t seed, int32_t *perm, int64_t perm_count,
                                        double *kept_before, double *kept_after)
{
    struct perm_state p;
    int64_t n;
    double sum = 0.0, before, best;
    float *cs;
    int32_t *best_perm;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if ((st = check_permute(ctx, w, rows, cols, norms, perm, perm_count, &n)) != QS_OK)
        return st;
    if (max_sweeps < 0 || escapes < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "max_sweeps and escapes must be >= 0");
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(w[i]) || (norms && isinf(norms[i % cols])))
            return qs_fail(ctx, QS_ERR_NONFINITE, "the permutation search needs finite scores");
    if (max_sweeps == 0)
        max_sweeps = 16;
    if (n == 0) {
        /* No score to move: every order keeps all of nothing. The search would still visit every
         * row (rows x 0) or every stripe pair (0 x cols), so the identity is returned at once. */
        for (int64_t c = 0; c < cols; c++)
            perm[c] = (int32_t)c;
        if (kept_before)
            *kept_before = 1.0;
        if (kept_after)
            *kept_after = 1.0;
        return qs_ok(ctx);
    }

    cs = qs_scratch_alloc(ctx, (size_t)(n > 0 ? n : 1) * sizeof(float));
    p.sv = qs_scratch_alloc(ctx, (size_t)(cols / 4 + 1) * sizeof(double));
    best_perm = qs_scratch_alloc(ctx, (size_t)(cols + 1) * sizeof(int32_t));
    if (!cs || !p.sv || !best_perm) {
        qs_scratch_free(ctx, cs);
        qs_scratch_free(ctx, p.sv);
        qs_scratch_free(ctx, best_perm);
        return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "no memory for the permutation search");
    }
    /* Scores column-major, so a stripe's 4 columns are 4 contiguous runs. */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float a = fabsf(w[r * cols + c]);
            cs[c * rows + r] = norms ? a * norms[c] : a;
            sum += (double)cs[c * rows + r];
        }
    p.cs = cs;
    p.rows = rows;
    p.stripes = cols / 4;
    p.perm = perm;
    make_splits(p.splits);
    for (int64_t c = 0; c < cols; c++)
        perm[c] = (int32_t)c;
    for (int64_t s = 0; s < p.stripes; s++)
        p.sv[s] = stripe_value(&p, perm + 4 * s);
    before = best = total(&p);
    memcpy(best_perm, perm, (size_t)cols * sizeof(int32_t));

    for (int32_t sweeps = 0, esc = 0; sweeps < max_sweeps;) {
        while (sweeps < max_sweeps && sweep(&p))
            sweeps++;
        double t = total(&p);
        if (t > best) {
            best = t;
            memcpy(best_perm, perm, (size_t)cols * sizeof(int32_t));
        }
        if (esc >= escapes || p.stripes < 2)
            break;
        /* Escape: a random non-identity split of a random stripe pair, even if it loses. */
        {
            int64_t s1 = (int64_t)(splitmix(&seed) % (uint64_t)p.stripes), s2;
            int k = 1 + (int)(splitmix(&seed) % 34u);
            double sa[35], sb[35];
            do
                s2 = (int64_t)(splitmix(&seed) % (uint64_t)p.stripes);
            while (s2 == s1);
            score_splits(&p, s1, s2, sa, sb);
            apply_split(&p, s1, s2, k, sa[k], sb[k]);
        }
        esc++;
        sweeps++;
    }
    memcpy(perm, best_perm, (size_t)cols * sizeof(int32_t));
    if (kept_before)
        *kept_before = sum > 0.0 ? before / sum : 1.0;
    if (kept_after)
        *kept_after = sum > 0.0 ? best / sum : 1.0;
    qs_scratch_free(ctx, cs);
    qs_scratch_free(ctx, p.sv);
    qs_scratch_free(ctx, best_perm);
    return qs_ok(ctx);
}
