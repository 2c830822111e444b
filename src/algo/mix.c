/* Mixed precision under a budget (lowbit.h, lb_mix_choose): one candidate
 * per unit so that the summed measured KLD is least for the bits allowed.
 *
 * The optimiser is the classic one of bit allocation (Shoham and Gersho
 * 1988; HAWQ-style mixed precision does the same on Hessian traces): with
 * the units' costs taken as additive, each unit's candidates reduce to
 * their lower convex hull in the (bits, KLD) plane (a point above the
 * hull is never worth its bits), every unit starts at its cheapest hull
 * point, and the step of largest KLD saved per bit spent is taken while
 * it fits in the budget (smaller steps that still fit are taken after a
 * larger one does not). On convex hulls this greedy path is the Pareto
 * front of the additive model, and each point on it is optimal for its own
 * bits up to the last step (the fill). Additivity is an assumption: the
 * caller measures the chosen mix as a whole (lowbit quantize does). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

typedef struct point {
    double bits, kld;
    size_t cand;
} point;

typedef struct hull {
    point *p;
    size_t n, at; /* at: the point chosen so far */
} hull;

static int by_bits(const void *pa, const void *pb)
{
    const point *a = pa, *b = pb;
    if (a->bits != b->bits) return a->bits < b->bits ? -1 : 1;
    if (a->kld != b->kld) return a->kld < b->kld ? -1 : 1;
    return (a->cand > b->cand) - (a->cand < b->cand);
}

/* KLD saved per bit going from a to b (b has more bits). */
static double gain(const point *a, const point *b) { return (a->kld - b->kld) / (b->bits - a->bits); }

/* Unit u's candidates as a lower convex hull, cheapest first. */
static lb_status make_hull(const lb_unit_cost *costs, size_t n_cands, size_t n_units, size_t u, hull *h)
{
    point *all = malloc(n_cands * sizeof *all);
    h->p = malloc(n_cands * sizeof *h->p);
    if (!all || !h->p) {
        free(all);
        return lb__fail(LB_ERR_NOMEM, "lb_mix_choose: out of memory");
    }
    for (size_t c = 0; c < n_cands; c++) {
        const lb_unit_cost *k = &costs[c * n_units + u];
        all[c] = (point){k->bits, k->measured ? k->kld : 0, c};
        if (!isfinite(all[c].bits) || !isfinite(all[c].kld) || all[c].bits < 0) {
            lb_status st = lb__fail(LB_ERR_ARG, "lb_mix_choose: unit %zu, candidate %zu: bits %g, KLD %g", u, c,
                                    all[c].bits, all[c].kld);
            free(all);
            return st;
        }
    }
    qsort(all, n_cands, sizeof *all, by_bits);
    h->n = 0;
    for (size_t k = 0; k < n_cands; k++) {
        /* Pareto: more bits must buy less KLD */
        if (h->n && all[k].kld >= h->p[h->n - 1].kld) continue;
        /* convex: the gains per bit must fall along the hull */
        while (h->n >= 2 && gain(&h->p[h->n - 2], &h->p[h->n - 1]) <= gain(&h->p[h->n - 1], &all[k])) h->n--;
        h->p[h->n++] = all[k];
    }
    free(all);
    h->at = 0;
    return LB_OK;
}

static lb_status push(lb_mix_result *r, size_t *cap, double bits, double kld)
{
    if (r->n_front == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        lb_mix_point *g = realloc(r->front, c * sizeof *g);
        if (!g) return lb__fail(LB_ERR_NOMEM, "lb_mix_choose: out of memory");
        r->front = g, *cap = c;
    }
    r->front[r->n_front++] = (lb_mix_point){bits, kld};
    return LB_OK;
}

/* The unit whose next hull step saves the most KLD per bit among those
 * that fit in `room` bits (room < 0: any); n_units when none. */
static size_t best_step(const hull *h, size_t n_units, double room)
{
    size_t best = n_units;
    double g_best = -1;
    for (size_t u = 0; u < n_units; u++) {
        if (h[u].at + 1 >= h[u].n) continue;
        const point *a = &h[u].p[h[u].at], *b = &h[u].p[h[u].at + 1];
        if (room >= 0 && b->bits - a->bits > room) continue;
        double g = gain(a, b);
        if (g > g_best) g_best = g, best = u;
    }
    return best;
}

lb_status lb_mix_choose(const lb_unit_cost *costs, size_t n_cands, size_t n_units, const lb_mix_options *o,
                        size_t *choice, lb_mix_result *out)
{
    if (!costs || !o || !choice || !out || !n_cands || !n_units) return lb__fail(LB_ERR_ARG, "lb_mix_choose: NULL argument");
    int by_budget = o->budget_bits > 0;
    if (!by_budget && !(o->max_kld > 0))
        return lb__fail(LB_ERR_ARG, "lb_mix_choose: give a budget in bits or a largest KLD");
    memset(out, 0, sizeof *out);
    hull *h = calloc(n_units, sizeof *h);
    if (!h) return lb__fail(LB_ERR_NOMEM, "lb_mix_choose: out of memory");
    lb_status st = LB_OK;
    double bits = 0, kld = 0;
    size_t cap = 0;
    for (size_t u = 0; u < n_units && st == LB_OK; u++)
        if ((st = make_hull(costs, n_cands, n_units, u, &h[u])) == LB_OK) bits += h[u].p[0].bits, kld += h[u].p[0].kld;
    if (st == LB_OK && by_budget && bits > o->budget_bits)
        st = lb__fail(LB_ERR_ARG, "lb_mix_choose: the budget of %.0f bits is below the cheapest candidates' %.0f",
                      o->budget_bits, bits);
    if (st == LB_OK) st = push(out, &cap, bits, kld);
    while (st == LB_OK) {
        if (!by_budget && kld <= o->max_kld) break;
        size_t u = best_step(h, n_units, by_budget ? o->budget_bits - bits : -1);
        if (u == n_units) break;
        const point *a = &h[u].p[h[u].at], *b = &h[u].p[h[u].at + 1];
        bits += b->bits - a->bits, kld += b->kld - a->kld;
        h[u].at++;
        st = push(out, &cap, bits, kld);
    }
    if (st == LB_OK) {
        for (size_t u = 0; u < n_units; u++) choice[u] = h[u].p[h[u].at].cand;
        out->bits = bits, out->kld = kld;
        out->reached = by_budget || kld <= o->max_kld;
    }
    for (size_t u = 0; u < n_units; u++) free(h[u].p);
    free(h);
    if (st != LB_OK) lb_mix_result_free(out);
    return st;
}

void lb_mix_result_free(lb_mix_result *r)
{
    if (!r) return;
    free(r->front);
    r->front = NULL, r->n_front = 0;
}
