// The immersed boundary method on the device (thelma_core::physics::immersed, the same direct
// forcing the coordinator runs on the host for the CPU module): compiled after lbm_d3q19.cu when a
// case has immersed bodies, with the prelude's `thelma_ib` functions (Roma's kernel and the band's
// macroscopic state, printed from thelma-core in double) and `thelma_collide_forced`.
//
// A step of a module that holds the bodies:
//   1. ib_place (a thread per point, or a group of THELMA_IB_GROUP lanes: see ib_iterate): each
//      point placed by its body's pose (uploaded 64 steps at a time), its 27 support nodes and
//      their weights written for the iterations (`tab`, `wts`: 27 entries a point) and marked in
//      the band's bitmap (a bit a slab node, zero between steps). ib_count, ib_scan
//      and ib_list then list the marked nodes in node order: the band (`band[slot]`: its node;
//      `slot[node]`: its band slot, a dense array read only at this step's band, every entry
//      below the band's capacity). In node order a point's rows of three nodes along x are three
//      adjacent slots, and the kernels over the band pull rows of the lattice.
//   2. ib_band (band nodes, a grid-stride loop): the populations the step will pull there, and ρ
//      and u* = (j + F/2)/ρ under the uniform force; both force records cleared, the read one
//      holding 1/(2ρ) (over the fixed point's scale) in its fourth word.
//   3. K times ib_iterate (per point: interpolate, correct the point's force, spread it) and
//      ib_fold (per band node: the record read next holds the sums written).
//   4. the fused step (lbm_d3q19.cu's collide_propagate, compiled with THELMA_IMMERSED) collides
//      each node whose bit is set under the uniform force plus its spread force, and clears the
//      node's bit. ib_collide does the same after the step, over what it stored, for the
//      per-node forces the coordinator sets on several slabs.
//
// The first iteration turns each support node into its band slot, interpolates u* and ρ and keeps,
// per point, V = U_d − Σ δ u* and R = Σ δ ρ (`vr`); the later ones read the support's slots and
// weights (no position, no kernel, no slot map: a later iteration 28.5 → 25.3 µs with 18
// propellers, the placing that writes them 10.9 → 19.9 µs) and each node's record of 32 bytes,
// one sector: the force spread so far S (fixed point, three words) and 1/(2ρ) — the interpolated
// velocity is Σ δ u* plus Σ δ S/(2ρ), and V − Σ δ S/(2ρ) is what the force corrects.
//
// Spreading adds each point's share to its nodes with 64-bit integer atomics on a fixed-point
// force (2^-50 of a lattice unit): integer sums do not depend on their order, so a run is
// deterministic whatever the threads' timing.

#ifdef THELMA_GRID
#error "immersed bodies run on slabs only: their kernels take no grid parity"
#endif

#define THELMA_IB_SCALE 1125899906842624.0
// Doubles per body pose: origin, centre, rotation (row-major), angular velocity, velocity.
#define THELMA_IB_POSE 21

static_assert(THELMA_IB_GROUP <= 32 && 32 % THELMA_IB_GROUP == 0,
              "a group of lanes serving a point lies within one warp");

// The three support nodes of coordinate x along an axis of `len` nodes (wrapped when `periodic`,
// clamped otherwise: the host keeps every walled axis's support inside) and Roma's weights at them
// (thelma_core::physics::immersed::support_1d).
__device__ __forceinline__ void thelma_ib_support(double x, int len, bool periodic, int* node,
                                                  double* w) {
    const int first = (int)floor(x + 0.5) - 1;
#pragma unroll
    for (int k = 0; k < 3; k++) {
        const double r = fabs((double)(first + k) - x);
        w[k] = r <= 0.5 ? thelma_ib::delta_inner(r)
                        : (r < 1.5 ? thelma_ib::delta_outer(r) : 0.0);
        int i = first + k;
        if (periodic) {
            i = ((i % len) + len) % len;
        } else {
            i = min(max(i, 0), len - 1);
        }
        node[k] = i;
    }
}

// The support of point k: its 27 nodes' slab indices (x fastest, then y, then z, as the host's
// plan) and weights.
// Entry i of three, by selects (the placing's; the iterations read the support it writes): indexed
// by a lane's own support node, the arrays went to local memory, and an iteration that computed
// the support took 34.3 µs where it then took 28.9 (18 propellers, PERFORMANCE.md).
template <typename T>
__device__ __forceinline__ T thelma_ib_pick(const T* a, int i) {
    return i == 0 ? a[0] : (i == 1 ? a[1] : a[2]);
}

struct thelma_ib_kernel {
    int ix[3], iy[3], iz[3];
    double wx[3], wy[3], wz[3];
    __device__ __forceinline__ unsigned int node(int s, int nx, int ny) const {
        return (unsigned int)(thelma_ib_pick(ix, s % 3) +
                              nx * (thelma_ib_pick(iy, s / 3 % 3) + ny * thelma_ib_pick(iz, s / 9)));
    }
    __device__ __forceinline__ double weight(int s) const {
        return thelma_ib_pick(wx, s % 3) * thelma_ib_pick(wy, s / 3 % 3) *
               thelma_ib_pick(wz, s / 9);
    }
};

__device__ __forceinline__ thelma_ib_kernel thelma_ib_kernel_at(const double* __restrict__ x,
                                                                int nx, int ny, int nz,
                                                                int periodic) {
    thelma_ib_kernel k;
    thelma_ib_support(x[0], nx, periodic & 1, k.ix, k.wx);
    thelma_ib_support(x[1], ny, periodic & 2, k.iy, k.wy);
    thelma_ib_support(x[2], nz, periodic & 4, k.iz, k.wz);
    return k;
}

// The step's pull of node p (lbm_d3q19.cu's pull_node), with the open-face links in a case that has
// some.
__device__ __forceinline__ void thelma_ib_pull(real* f, const store_t* __restrict__ a,
                                               unsigned int k, unsigned int mask,
                                               const real* __restrict__ pal_term,
                                               const unsigned int* __restrict__ pal_link,
                                               const store_t* below_in, const store_t* above_in,
                                               int nx, int ny, int nz, int periodic, int x, int y,
                                               int z, size_t p, int z0, int nz_domain, int open) {
    if (open)
        pull_node<store_t, true>(f, a, k, mask, pal_term, pal_link, below_in, above_in, nx, ny,
                                 nz, periodic, x, y, z, p, z0, nz_domain, 0);
    else
        pull_node<store_t, false>(f, a, k, mask, pal_term, pal_link, below_in, above_in, nx, ny,
                                  nz, periodic, x, y, z, p, z0, nz_domain, 0);
}

// What every kernel pulling nodes as the step does takes first (thelma_compute's
// StepView::pull_args): the lattice read, the palette, the incoming interfaces, the size, the
// periodic axes, the slab's first plane and the domain's planes, whether links are open.
#define THELMA_IB_PULL_ARGS                                                                        \
    const store_t *__restrict__ a, const thelma_index *__restrict__ index,                         \
        const unsigned int *__restrict__ pal_mask, const real *__restrict__ pal_term,              \
        const unsigned int *__restrict__ pal_link, const store_t *below_in,                        \
        const store_t *above_in, int nx, int ny, int nz, int periodic, int z0, int nz_domain,      \
        int open

// Pulls slab node p as the step will (thelma_ib_pull at its coordinates and palette entry).
__device__ __forceinline__ void thelma_ib_pull_at(real* f, size_t p, THELMA_IB_PULL_ARGS) {
    const int x = (int)(p % nx), y = (int)(p / nx % ny), z = (int)(p / ((size_t)nx * ny));
    const unsigned int k = index[p];
    thelma_ib_pull(f, a, k, pal_mask[k], pal_term, pal_link, below_in, above_in, nx, ny, nz,
                   periodic, x, y, z, p, z0, nz_domain, open);
}

// 1. Places every point at this step's pose of its body (thelma_core::physics::immersed::Pose::place)
// and marks its support nodes in the band's bitmap; writes the point's 27 support entries (node,
// weight) into `tab` and `wts` for the iterations. With LANES = THELMA_IB_GROUP a group of lanes
// serves a point, each lane every LANES-th entry and every LANES-th of its nine rows along x;
// with 1, a thread serves a point, all its entries and rows.
template <int LANES>
__device__ __forceinline__ void ib_place(const double* __restrict__ pose,
                                         const unsigned int* __restrict__ body,
                                         const double* __restrict__ ref, int points,
                                         unsigned int* __restrict__ tab,
                                         double* __restrict__ wts, double* __restrict__ u_out,
                                         unsigned int* marks, int nx, int ny, int nz,
                                         int periodic) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int k = t / LANES, lane = t % LANES;
    if (k >= points) return;
    const double* P = pose + (size_t)body[k] * THELMA_IB_POSE;
    double d[3], r[3], x[3];
#pragma unroll
    for (int a = 0; a < 3; a++) d[a] = ref[3 * (size_t)k + a] - P[a];
#pragma unroll
    for (int a = 0; a < 3; a++) {
        r[a] = P[6 + 3 * a] * d[0] + P[6 + 3 * a + 1] * d[1] + P[6 + 3 * a + 2] * d[2];
        x[a] = P[3 + a] + r[a];
    }
    if (lane == 0) {
        const double* w = P + 15;
        u_out[3 * (size_t)k] = P[18] + (w[1] * r[2] - w[2] * r[1]);
        u_out[3 * (size_t)k + 1] = P[19] + (w[2] * r[0] - w[0] * r[2]);
        u_out[3 * (size_t)k + 2] = P[20] + (w[0] * r[1] - w[1] * r[0]);
    }
    const thelma_ib_kernel K = thelma_ib_kernel_at(x, nx, ny, nz, periodic);
    // The support for the iterations, entry s of the point's 27 (x fastest): its node (ib_iterate's
    // first pass turns it into the node's band slot) and its weight.
    for (int s = lane; s < 27; s += LANES) {
        tab[27 * (size_t)k + s] = K.node(s, nx, ny);
        wts[27 * (size_t)k + s] = K.weight(s);
    }
    for (int row = lane; row < 9; row += LANES) {
        unsigned int n[3];
#pragma unroll
        for (int i = 0; i < 3; i++) n[i] = K.node(3 * row + i, nx, ny);
        // A row's three nodes (adjacent, clamped onto one another at a wall, or wrapped across
        // the slab) in at most three words: each word's bits set once, after a plain read, for
        // most are set already by a neighbouring point (a stale read only costs a needless OR:
        // bits are only set while points are placed).
#pragma unroll
        for (int i = 0; i < 3; i++) {
            const unsigned int w = n[i] >> 5;
            bool earlier = false;
            unsigned int m = 0;
#pragma unroll
            for (int j = 0; j < 3; j++) {
                if (n[j] >> 5 == w) {
                    if (j < i) earlier = true;
                    m |= 1u << (n[j] & 31);
                }
            }
            if (!earlier && (marks[w] & m) != m) atomicOr(&marks[w], m);
        }
    }
}

#define THELMA_IB_PLACE_ARGS                                                                       \
    const double *__restrict__ pose, const unsigned int *__restrict__ body,                        \
        const double *__restrict__ ref, int points, unsigned int *__restrict__ tab,                \
        double *__restrict__ wts, double *__restrict__ u_out, unsigned int *marks, int nx, int ny, \
        int nz, int periodic

extern "C" __global__ void __launch_bounds__(128) THELMA_NAME(ib_place)(THELMA_IB_PLACE_ARGS) {
    ib_place<1>(pose, body, ref, points, tab, wts, u_out, marks, nx, ny, nz, periodic);
}

extern "C" __global__ void __launch_bounds__(128)
THELMA_NAME(ib_place_group)(THELMA_IB_PLACE_ARGS) {
    ib_place<THELMA_IB_GROUP>(pose, body, ref, points, tab, wts, u_out, marks, nx, ny, nz,
                              periodic);
}

// The bitmap's chunks: THELMA_IB_CHUNK words (printed from the host's constant), a word a thread
// of a block of 128 (a thread listing eight words ran up to 256 nodes in a row: the listing took
// 20 µs in ib_list with 18 propellers); the bitmap is allocated in whole chunks, its words past the slab's
// nodes always zero.
static_assert(THELMA_IB_CHUNK == 128, "a chunk is a word a thread of a block of 128");

// The exclusive prefix of `v` over a block of WARPS warps, in thread order, and the block's total.
// Its shared words are read after its barrier: a block calling it again must pass a barrier first.
template <int WARPS>
__device__ __forceinline__ unsigned int thelma_ib_block_prefix(unsigned int v,
                                                               unsigned int* total) {
    __shared__ unsigned int warps[WARPS];
    const unsigned int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    unsigned int incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned int up = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= (unsigned int)o) incl += up;
    }
    if (lane == 31) warps[warp] = incl;
    __syncthreads();
    unsigned int before = 0, all = 0;
#pragma unroll
    for (int w = 0; w < WARPS; w++) {
        if ((unsigned int)w < warp) before += warps[w];
        all += warps[w];
    }
    *total = all;
    return before + incl - v;
}

// 1b. Per chunk of the bitmap: its marked nodes, counted.
extern "C" __global__ void __launch_bounds__(128)
THELMA_NAME(ib_count)(const unsigned int* __restrict__ marks, unsigned int* __restrict__ chunk) {
    const unsigned int c = __popc(marks[(size_t)blockIdx.x * THELMA_IB_CHUNK + threadIdx.x]);
    unsigned int total;
    thelma_ib_block_prefix<4>(c, &total);
    if (threadIdx.x == 0) chunk[blockIdx.x] = total;
}

// 1c. One block of 1,024 threads: the chunks' counts turned into their first slots (an exclusive
// prefix sum, in place), and the band's size into `count`, never beyond the band's `capacity`
// (the 27 nodes a point, or the slab's: what this step's points mark; a bit left by a step that
// failed on the way is cleared by the host before the next placing).
extern "C" __global__ void __launch_bounds__(1024)
THELMA_NAME(ib_scan)(unsigned int* __restrict__ chunk, unsigned int chunks,
                     unsigned int* __restrict__ count, unsigned int capacity) {
    unsigned int carry = 0;
    for (unsigned int base = 0; base < chunks; base += 1024) {
        const unsigned int i = base + threadIdx.x;
        const unsigned int v = i < chunks ? chunk[i] : 0;
        unsigned int all;
        const unsigned int before = thelma_ib_block_prefix<32>(v, &all);
        if (i < chunks) chunk[i] = carry + before;
        carry += all;
        __syncthreads();
    }
    if (threadIdx.x == 0) *count = min(carry, capacity);
}

// 1d. Per chunk: its marked nodes listed in node order from the chunk's first slot (the band
// and its map), within the band's capacity. The bits stay for the step, which clears them.
extern "C" __global__ void __launch_bounds__(128)
THELMA_NAME(ib_list)(const unsigned int* __restrict__ marks,
                     const unsigned int* __restrict__ chunk, unsigned int* __restrict__ slot,
                     unsigned int* __restrict__ band, unsigned int capacity) {
    const size_t w = (size_t)blockIdx.x * THELMA_IB_CHUNK + threadIdx.x;
    unsigned int bits = marks[w];
    unsigned int total;
    unsigned int at = chunk[blockIdx.x] + thelma_ib_block_prefix<4>(__popc(bits), &total);
    if (bits == 0) return;
    while (bits != 0 && at < capacity) {
        const unsigned int node = (unsigned int)(32 * w) + (unsigned int)(__ffs(bits) - 1);
        bits &= bits - 1;
        band[at] = node;
        slot[node] = at;
        at++;
    }
}

// The force records of band slot s, THELMA_IB_RECORD words each (4, from the prelude: 32 bytes,
// one sector): the one read holds the force spread so far (fixed point) and 1/(2ρ·THELMA_IB_SCALE)
// as the bits of a double, which turns the fixed-point sums into velocities; the one written, at
// slot `capacity + s`, the sums of this iteration's spreading.

// 2. The band's state before the forcing: each node pulled as this step will pull it, ρ and u*
// under the uniform force (printed from thelma_core::physics::macroscopic), both force records
// cleared and 1/(2ρ·THELMA_IB_SCALE) in the read one. A grid-stride loop: only the device knows the
// band's size.
extern "C" __global__ void __launch_bounds__(128)
THELMA_NAME(ib_band)(THELMA_IB_PULL_ARGS, const unsigned int* __restrict__ band,
                     const unsigned int* __restrict__ count, double* __restrict__ rho,
                     double* __restrict__ u, long long* __restrict__ acc, unsigned int capacity) {
    const unsigned int n = *count;
    for (unsigned int s = blockIdx.x * blockDim.x + threadIdx.x; s < n;
         s += gridDim.x * blockDim.x) {
        const size_t p = band[s];
        real f[THELMA_Q];
        thelma_ib_pull_at(f, p, a, index, pal_mask, pal_term, pal_link, below_in, above_in, nx,
                          ny, nz, periodic, z0, nz_domain, open);
        double g[THELMA_Q];
#pragma unroll
        for (int i = 0; i < THELMA_Q; i++) g[i] = (double)f[i];
        double r[1], v[3];
        thelma_ib::macroscopic(g, r, v);
        rho[s] = r[0];
#pragma unroll
        for (int c = 0; c < 3; c++) u[3 * (size_t)s + c] = v[c];
        longlong2* read = reinterpret_cast<longlong2*>(acc + THELMA_IB_RECORD * (size_t)s);
        longlong2* write =
            reinterpret_cast<longlong2*>(acc + THELMA_IB_RECORD * ((size_t)capacity + s));
        read[0] = make_longlong2(0, 0);
        read[1] = make_longlong2(0, __double_as_longlong(1.0 / (THELMA_IB_SCALE * 2.0 * r[0])));
        write[0] = make_longlong2(0, 0);
        write[1] = make_longlong2(0, 0);
    }
}

// 3a. One iteration of the direct forcing: the velocity interpolated from the band (u* moved by the
// force spread so far over 2ρ), the point's force density corrected by 2ρ(U_d − U) and summed in
// `total`, the correction times the point's area spread into the written records. The first
// iteration (nothing spread yet) interpolates u* and ρ and keeps V = U_d − Σ δ u* and R = Σ δ ρ in
// `vr`; the later ones interpolate only the spread force's velocity Σ δ S/(2ρ) from the read
// records and correct by 2R(V − Σ δ S/(2ρ)). The first turns the support's nodes in `tab` into
// band slots in place, which the later ones read with `wts`: it runs once after each placing,
// never twice (a second pass would index the slot map by slots). With LANES = 1 a thread serves a point (the "kernel"
// strategy); with THELMA_IB_GROUP a group of lanes does, each lane every LANES-th support node,
// the sums reduced across the group by a butterfly (every lane ends with the same sums, in an
// order fixed by the lanes).
template <int LANES>
__device__ __forceinline__ void ib_iterate(unsigned int* __restrict__ tab,
                                           const double* __restrict__ wts,
                                           const double* __restrict__ ud,
                                           const double* __restrict__ area, int points,
                                           const unsigned int* __restrict__ slot,
                                           const double* __restrict__ rho,
                                           const double* __restrict__ u,
                                           const long long* __restrict__ read, long long* write,
                                           double* __restrict__ total, double* __restrict__ vr,
                                           int first) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int k = t / LANES, lane = t % LANES;
    if (k >= points) return;
    unsigned int* tk = tab + 27 * (size_t)k;
    const double* wk = wts + 27 * (size_t)k;
    double U[3] = {0.0, 0.0, 0.0}, R = 0.0;
#pragma unroll
    for (int m = 0; m < (27 + LANES - 1) / LANES; m++) {
        const int s = lane + m * LANES;
        if (s < 27) {
            const double w = wk[s];
            if (first) {
                // The placing's node, turned into its band slot for the later iterations.
                const unsigned int b = slot[tk[s]];
                tk[s] = b;
#pragma unroll
                for (int c = 0; c < 3; c++) U[c] += w * u[3 * (size_t)b + c];
                R += w * rho[b];
            } else {
                const unsigned int b = tk[s];
                const longlong2* rec =
                    reinterpret_cast<const longlong2*>(read + THELMA_IB_RECORD * (size_t)b);
                const longlong2 s01 = rec[0], s2h = rec[1];
                const double wh = w * __longlong_as_double(s2h.y);
                U[0] += wh * (double)s01.x;
                U[1] += wh * (double)s01.y;
                U[2] += wh * (double)s2h.x;
            }
        }
    }
    if (LANES > 1) {
        // The group's lanes: LANES consecutive lanes of one warp (LANES divides 32).
        const unsigned int group =
            LANES == 32 ? 0xffffffffu
                        : ((1u << (LANES % 32)) - 1u) << ((threadIdx.x % 32) / LANES * LANES);
#pragma unroll
        for (int o = LANES / 2; o > 0; o >>= 1) {
#pragma unroll
            for (int c = 0; c < 3; c++) U[c] += __shfl_xor_sync(group, U[c], o);
            if (first) R += __shfl_xor_sync(group, R, o);
        }
        // The slots the group's lanes wrote, seen by the spreading below.
        if (first) __syncwarp(group);
    }
    double* vk = vr + 4 * (size_t)k;
    double V[3];
    if (first) {
#pragma unroll
        for (int c = 0; c < 3; c++) V[c] = ud[3 * (size_t)k + c] - U[c];
        if (lane == 0) {
#pragma unroll
            for (int c = 0; c < 3; c++) vk[c] = V[c];
            vk[3] = R;
        }
    } else {
#pragma unroll
        for (int c = 0; c < 3; c++) V[c] = vk[c] - U[c];
        R = vk[3];
    }
    double df[3];
#pragma unroll
    for (int c = 0; c < 3; c++) {
        df[c] = 2.0 * R * V[c];
        if (lane == 0)
            total[3 * (size_t)k + c] = first ? df[c] : total[3 * (size_t)k + c] + df[c];
        df[c] *= area[k] * THELMA_IB_SCALE;
    }
    // The 81 sums (node s, component c) in the order 3s + c, a group's lanes taking every
    // LANES-th, so that one instruction's lanes add to the components of few records, each one
    // sector: a node's three, and adjacent slots along x (slot and weight read again, in L1 from
    // the reads above).
    for (int i = lane; i < 81; i += LANES) {
        const int s = i / 3, c = i - 3 * (i / 3);
        const unsigned int b = tk[s];
        const double dc = c == 0 ? df[0] : (c == 1 ? df[1] : df[2]);
        atomicAdd((unsigned long long*)&write[THELMA_IB_RECORD * (size_t)b + c],
                  (unsigned long long)__double2ll_rn(wk[s] * dc));
    }
}

#define THELMA_IB_ITERATE_ARGS                                                                     \
    unsigned int *__restrict__ tab, const double *__restrict__ wts,                                \
        const double *__restrict__ ud, const double *__restrict__ area, int points,                \
        const unsigned int *__restrict__ slot, const double *__restrict__ rho,                     \
        const double *__restrict__ u, const long long *__restrict__ read, long long *write,        \
        double *__restrict__ total, double *__restrict__ vr, int first

extern "C" __global__ void __launch_bounds__(128)
THELMA_NAME(ib_iterate)(THELMA_IB_ITERATE_ARGS) {
    ib_iterate<1>(tab, wts, ud, area, points, slot, rho, u, read, write, total, vr, first);
}

extern "C" __global__ void __launch_bounds__(128)
THELMA_NAME(ib_iterate_group)(THELMA_IB_ITERATE_ARGS) {
    ib_iterate<THELMA_IB_GROUP>(tab, wts, ud, area, points, slot, rho, u, read, write, total, vr,
                                first);
}

// 3b. After an iteration, per band node (a grid-stride loop): the read record takes the sums the
// written one holds (then both hold the force spread so far); after the last, the node's force
// density into `force` instead.
extern "C" __global__ void __launch_bounds__(128)
THELMA_NAME(ib_fold)(const unsigned int* __restrict__ count, long long* __restrict__ read,
                     const long long* __restrict__ write, double* __restrict__ force, int last) {
    const unsigned int n = *count;
    for (unsigned int s = blockIdx.x * blockDim.x + threadIdx.x; s < n;
         s += gridDim.x * blockDim.x) {
        const size_t r = THELMA_IB_RECORD * (size_t)s;
#pragma unroll
        for (int c = 0; c < 3; c++) {
            const long long v = write[r + c];
            if (last)
                force[3 * (size_t)s + c] = (double)v / THELMA_IB_SCALE;
            else
                read[r + c] = v;
        }
    }
}

// After the step, per node the coordinator forced (on several slabs, where no module holds the
// bodies): pulled again from lattice a, collided under the uniform force plus its own `force` and
// stored over what the step stored in b (and in the outgoing interface buffers on a boundary
// layer), as the step would have with that force. A grid-stride loop.
extern "C" __global__ void __launch_bounds__(128)
THELMA_NAME(ib_collide)(THELMA_IB_PULL_ARGS, store_t* __restrict__ b, store_t* above_out,
                        store_t* below_out, const unsigned int* __restrict__ nodes,
                        const unsigned int* __restrict__ count, const double* __restrict__ force,
                        double fx, double fy, double fz) {
    const unsigned int n = *count;
    for (unsigned int s = blockIdx.x * blockDim.x + threadIdx.x; s < n;
         s += gridDim.x * blockDim.x) {
        const size_t p = nodes[s];
        const unsigned int k = index[p];
        const unsigned int mask = pal_mask[k];
        if (mask & THELMA_SOLID_BIT) continue;
        const int x = (int)(p % nx), y = (int)(p / nx % ny), z = (int)(p / ((size_t)nx * ny));
        real f[THELMA_Q];
        thelma_ib_pull(f, a, k, mask, pal_term, pal_link, below_in, above_in, nx, ny, nz,
                       periodic, x, y, z, p, z0, nz_domain, open);
        // The host's per-node force: the uniform force plus the node's, summed in double,
        // rounded once.
        const real F[3] = {(real)(fx + force[3 * (size_t)s]),
                           (real)(fy + force[3 * (size_t)s + 1]),
                           (real)(fz + force[3 * (size_t)s + 2])};
        thelma_collide_forced(f, F, (real)0.0);
#ifdef THELMA_SPONGE
        if (open) thelma_sponge_absorb(f, x, y, z0 + z);
#endif
        store_node(f, b, above_out, below_out, nx, ny, nz, x, y, z, p, 0);
    }
}

// The live view's plane at the listed nodes (the band, or the nodes the host forced) that lie in
// it: plane_d3q19 reported their velocity under the uniform force alone; here it is again under the
// uniform force plus their own, summed in double and rounded once as the step did, as the host's
// read_fields reports it.
extern "C" __global__ void __launch_bounds__(128)
THELMA_NAME(ib_plane)(const store_t* __restrict__ a, const thelma_index* __restrict__ index,
                      const unsigned int* __restrict__ pal_mask, int nx, int ny, int nz, int axis,
                      int at, const unsigned int* __restrict__ nodes,
                      const unsigned int* __restrict__ count, const double* __restrict__ force,
                      double fx, double fy, double fz, float* __restrict__ out) {
    const unsigned int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= *count) return;
    const size_t p = nodes[s];
    const int x = (int)(p % nx), y = (int)(p / nx % ny), z = (int)(p / ((size_t)nx * ny));
    if ((axis == 0 ? x : (axis == 1 ? y : z)) != at) return;
    if (pal_mask[index[p]] & THELMA_SOLID_BIT) return;
    // Where plane_d3q19 put the node: row-major over the plane's other two axes.
    const int sa = axis == 0 ? ny : nx, sb = axis == 2 ? ny : nz;
    const int k = (axis == 2 ? y : z) * sa + (axis == 0 ? y : x);
    const int cells = sa * sb;
    const thelma_node<store_t> g{a + p, (size_t)nx * ny * nz};
    const real F[3] = {(real)(fx + force[3 * (size_t)s]), (real)(fy + force[3 * (size_t)s + 1]),
                       (real)(fz + force[3 * (size_t)s + 2])};
    real u[3];
    thelma_stored_velocity(g, F, u);
    out[cells + k] = (float)u[0];
    out[2 * cells + k] = (float)u[1];
    out[3 * cells + k] = (float)u[2];
}

// The populations step t will pull into each listed node (what it collides them from), Q per node:
// the band the coordinator forces on the host.
extern "C" __global__ void __launch_bounds__(128)
THELMA_NAME(ib_pull)(THELMA_IB_PULL_ARGS, const unsigned int* __restrict__ nodes, int count,
                     real* __restrict__ out) {
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= count) return;
    const size_t p = nodes[s];
    real f[THELMA_Q];
    thelma_ib_pull_at(f, p, a, index, pal_mask, pal_term, pal_link, below_in, above_in, nx, ny, nz,
                      periodic, z0, nz_domain, open);
#pragma unroll
    for (int i = 0; i < THELMA_Q; i++) out[(size_t)s * THELMA_Q + i] = f[i];
}
