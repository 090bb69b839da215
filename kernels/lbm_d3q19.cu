// D3Q19 lattice Boltzmann kernels of thelma: the fused pull collide-and-propagate step, the export of
// a slab's boundary layers into interface buffers, and the reductions of the watchdog and of the
// convergence measure.
//
// Compiled at run time by NVRTC after a prelude generated from thelma-core (thelma_compute::cuda::prelude)
// that defines `real`, `thelma_index` (a node's palette index: one byte, or two for large palettes),
// THELMA_NAME, THELMA_COLLIDE_NAME, the direction table (cx, cy, cz, opp, weight, slot_of, up_dir,
// down_dir), the flag bits, the block size and the collision `thelma_collide`, printed from the Rust
// operator the CPU module runs, and with sponge layers THELMA_SPONGE and `thelma_sponge_absorb`.
// Nothing here may restate the table or any physical rule: each has one source of truth.
//
// Populations are stored shifted by their weights (g = f − w, thelma_core::physics): the rest state is
// all zeros and the density is 1 + Σ g. They are held as `store_t` (the arithmetic type `real`, or
// 16 bits with f16 storage) and converted on every load and store by the prelude's thelma_load,
// thelma_ldg and thelma_store (thelma_core::Stored): templates below take the stored type `S` of a
// lattice or buffer, and every value they compute with is `real`.
//
// Layout: populations f[i][z][y][x], x fastest; one thread per node, blocks of THELMA_BLOCK_X threads
// along x, grid (ceil(nx / block), ny, nz). Interface buffers are [population slot (5)][y][x] planes
// (a sixth after them for a temperature lattice's crossing population, kernels/thermal_d3q7.cu) in
// channels of mapped host, device or peer memory (thelma_core::Transport): the boundary layers store
// their outgoing populations straight into the neighbours' and load theirs from their own, so no copy
// is enqueued between steps (but for a grid's x faces over host memory: below).

// A grid's subdomain (a partition that cuts x or y, THELMA_GRID): every side of the box, its z
// faces included, reads and writes through the channel tables below, which the module fills when
// it attaches its channels (thelma_compute::cuda::CudaModule): the address of buffer b of the
// channel read across side s (thelma_core::SIDES) in thelma_side_in[b][s], of the one written in
// thelma_side_out[b][s], 0 where the side has none (a wall). A step of parity t % 2 (the kernels'
// `parity`) reads buffers 1 − parity and writes buffers parity. A channel across side s holds the
// populations pulled across it (the prelude's thelma_side_slot, thelma_side_out_dir), each over the
// nodes of the side's face or edge with x fastest along its free axes: the CPU module's layout
// (thelma_compute's cpu_sides.rs), so that both modules' subdomains exchange alike. An x face's
// channel in page-locked host memory is named here by a device buffer of its size, which the
// module copies in before the step and out after it (one node a row stores and loads it: over the
// host link each access would be a transaction of its own). thelma_box holds
// the box's first node along x and y and the domain's size along them (inlet profiles and sponges
// are in the domain's coordinates). Slabs compile none of this: their kernels are unchanged.
#ifdef THELMA_GRID
#if defined(THELMA_IN_PLACE)
#error "in-place streaming runs on slabs only: its kernels take no grid parity"
#endif
__constant__ unsigned long long thelma_side_in[2][THELMA_SIDES];
__constant__ unsigned long long thelma_side_out[2][THELMA_SIDES];
__constant__ int thelma_box[4];
#define THELMA_GRID_PARAM , int parity
#define THELMA_PARITY parity
#define THELMA_GX(x) (thelma_box[0] + (x))
#define THELMA_GY(y) (thelma_box[1] + (y))
#define THELMA_NX_DOMAIN(nx) thelma_box[2]
#define THELMA_NY_DOMAIN(ny) thelma_box[3]

// The slot of direction i in the channel read across an x face: its rank among the directions
// that cross it (cx = c: +1 across x−, −1 across x+), increasing (thelma_core::side_populations).
// Folds at compile time in the unrolled pulls.
__device__ __forceinline__ int thelma_x_slot(int i, int c) {
    int k = 0;
#pragma unroll
    for (int j = 0; j < THELMA_Q; j++) k += (j < i && cx(j) == c) ? 1 : 0;
    return k;
}

// The offset of box node (x, y, z) in one slot of the channel across the side towards (dx, dy, dz)
// (its free axes, x fastest), and in `m` the nodes of the slot.
__device__ __forceinline__ size_t side_offset(int dx, int dy, int dz, int x, int y, int z, int nx,
                                              int ny, int nz, size_t* m) {
    size_t off = 0, k = 1;
    if (dx == 0) {
        off = x;
        k = nx;
    }
    if (dy == 0) {
        off += (size_t)y * k;
        k *= ny;
    }
    if (dz == 0) {
        off += (size_t)z * k;
        k *= nz;
    }
    *m = k;
    return off;
}

// Calls visit(p, x, y, z) for every node p of a box of nx × ny × nz on one of its sides, the
// threads striding over the nodes: the export kernels' loop.
template <typename F>
__device__ __forceinline__ void for_side_nodes(int nx, int ny, int nz, F visit) {
    const size_t plane = (size_t)nx * ny;
    const size_t n = plane * nz;
    for (size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x; p < n;
         p += (size_t)gridDim.x * blockDim.x) {
        const int x = (int)(p % nx), y = (int)((p / nx) % ny), z = (int)(p / plane);
        if (x > 0 && x < nx - 1 && y > 0 && y < ny - 1 && z > 0 && z < nz - 1) continue;
        visit(p, x, y, z);
    }
}

// Population j at box position (xs, ys, zs), possibly beyond the box: inside it (wrapped along an
// x or y the partition leaves periodic and uncut: bit 0 and 1 of `periodic`), across the side the
// position lies beyond, or zero beyond a wall (bounce-back then replaces it). The CPU module's
// SideShapes::resolve.
template <typename S>
__device__ __forceinline__ real grid_value(const S* __restrict__ a, int j, int xs, int ys, int zs,
                                           int nx, int ny, int nz, int periodic, int parity,
                                           size_t n) {
    int ox = 0, oy = 0, oz = 0;
    if (xs < 0 || xs >= nx) {
        if (periodic & 1) xs = (xs + nx) % nx;
        else ox = xs < 0 ? -1 : 1;
    }
    if (ys < 0 || ys >= ny) {
        if (periodic & 2) ys = (ys + ny) % ny;
        else oy = ys < 0 ? -1 : 1;
    }
    if (zs < 0 || zs >= nz) oz = zs < 0 ? -1 : 1;
    if ((ox | oy | oz) == 0)
        return thelma_load(a[(size_t)j * n + ((size_t)zs * ny + ys) * nx + xs]);
    const int s = thelma_side_at[(ox + 1) + 3 * (oy + 1) + 9 * (oz + 1)];
    // A corner is no side: no D3Q19 pull or shifted pull reaches one (the CPU module panics).
    if (s < 0) return real(0.0);
    const S* buf = reinterpret_cast<const S*>(thelma_side_in[parity ^ 1][s]);
    if (buf == nullptr) return real(0.0);
    size_t m;
    const size_t off = side_offset(ox, oy, oz, xs, ys, zs, nx, ny, nz, &m);
    return thelma_load(buf[(size_t)thelma_side_slot[s][j] * m + off]);
}

// Stores the populations of box node (x, y, z) that cross each side whose layer holds it into this
// step's buffer written across that side (the sides fold at compile time; a node inside the box
// tests six coordinates).
template <typename S>
__device__ __forceinline__ void store_sides(const real* f, int nx, int ny, int nz, int x, int y,
                                            int z, int parity) {
    if (x > 0 && x < nx - 1 && y > 0 && y < ny - 1 && z > 0 && z < nz - 1) return;
#pragma unroll
    for (int s = 0; s < THELMA_SIDES; s++) {
        const int dx = side_dx(s), dy = side_dy(s), dz = side_dz(s);
        const bool on = (dx == 0 || x == (dx < 0 ? 0 : nx - 1)) &&
                        (dy == 0 || y == (dy < 0 ? 0 : ny - 1)) &&
                        (dz == 0 || z == (dz < 0 ? 0 : nz - 1));
        S* out = reinterpret_cast<S*>(thelma_side_out[parity][s]);
        if (!on || out == nullptr) continue;
        size_t m;
        const size_t off = side_offset(dx, dy, dz, x, y, z, nx, ny, nz, &m);
#pragma unroll
        for (int k = 0; k < THELMA_CROSSING; k++)
            if (k < side_out_len(s))
                out[(size_t)k * m + off] = thelma_store<S>(f[side_out_dir(s * THELMA_CROSSING + k)]);
    }
}
#else
#define THELMA_GRID_PARAM
#define THELMA_PARITY 0
#define THELMA_GX(x) (x)
#define THELMA_GY(y) (y)
#define THELMA_NX_DOMAIN(nx) (nx)
#define THELMA_NY_DOMAIN(ny) (ny)
#endif

// The value direction i pulls into row (y, z) at source column xs near a y or z edge of the slab
// (uniform over a block): wrapped on a periodic y axis, zero beyond a y wall (bounce-back then
// replaces it), and from the neighbour's interface buffer beyond the slab's z faces.
template <typename S>
__device__ __forceinline__ real pull_edge(const S* __restrict__ a, const S* below_in,
                                          const S* above_in, int i, int xs, int y, int z, int nx,
                                          int ny, int nz, int periodic, size_t n) {
    int ys = y - cy(i);
    if (ys < 0 || ys >= ny) {
        if (!(periodic & 2)) return real(0.0);
        ys = (ys + ny) % ny;
    }
    const int zs = z - cz(i);
    const size_t plane = (size_t)nx * ny;
    if (zs >= 0 && zs < nz)
        return thelma_load(a[(size_t)i * n + (size_t)zs * plane + (size_t)ys * nx + xs]);
    const S* buf = zs < 0 ? below_in : above_in;
    if (buf == nullptr) return real(0.0);
    return thelma_load(buf[(size_t)slot_of(i) * plane + (size_t)ys * nx + xs]);
}

// Population j of lattice a at node (xs, ys, zs) of the slab, wrapped on periodic x and y (an open
// link's source is inside the box, so only those axes wrap); a plane beyond the slab's z faces is
// read from the neighbour's interface buffer, where j crosses that face. In a grid's subdomain,
// grid_value.
template <typename S>
__device__ __forceinline__ real value_at(const S* __restrict__ a, const S* below_in,
                                         const S* above_in, int j, int xs, int ys, int zs, int nx,
                                         int ny, int nz, int periodic, int parity, size_t n) {
#ifdef THELMA_GRID
    return grid_value(a, j, xs, ys, zs, nx, ny, nz, periodic, parity, n);
#endif
    xs = (xs + nx) % nx;
    ys = (ys + ny) % ny;
    const size_t plane = (size_t)nx * ny;
    if (zs >= 0 && zs < nz)
        return thelma_load(a[(size_t)j * n + (size_t)zs * plane + (size_t)ys * nx + xs]);
    const S* buf = zs < 0 ? below_in : above_in;
    return thelma_load(buf[(size_t)slot_of(j) * plane + (size_t)ys * nx + xs]);
}

// The populations of one node of a lattice in memory (stride n between directions), indexed like an
// array: the printed boundary functions sum them as they load them, which keeps the open step's
// registers for the pulled populations (an array of the node's 19 held beside them spilled).
template <typename S>
struct thelma_node {
    const S* __restrict__ a;
    size_t n;
    __device__ __forceinline__ real operator[](int i) const { return thelma_load(a[(size_t)i * n]); }
};

// The amplitude this step of the wall-velocity slot an inlet word names (constant memory, set by the
// module before the steps it holds for).
__device__ __forceinline__ real thelma_inlet_amplitude(unsigned int word) {
    return thelma_amplitude[word & ((1u << THELMA_SLOT_BITS) - 1u)];
}

// The factor on inlet link i of node (x, y, z) of the domain (nx, ny, nz): the amplitude `s` times
// the printed profile across each axis the inlet word names, at the point where the link crosses
// the face (x − c_i/2).
__device__ __forceinline__ real thelma_inlet_scale(unsigned int word, real s, int i, int x, int y,
                                                   int z, int nx, int ny, int nz) {
    if ((word >> THELMA_SLOT_BITS) & 1u)
        s = s * thelma_parabola((real)x - (real)(0.5 * cx(i)), (real)nx);
    if ((word >> (THELMA_SLOT_BITS + 1u)) & 1u)
        s = s * thelma_parabola((real)y - (real)(0.5 * cy(i)), (real)ny);
    if ((word >> (THELMA_SLOT_BITS + 2u)) & 1u)
        s = s * thelma_parabola((real)z - (real)(0.5 * cz(i)), (real)nz);
    return s;
}

// The open-face links of node p (palette entry k): anti-bounce-back to a pressure outlet's density
// (the terms printed from thelma_core::physics::pressure_terms, once per node), velocity inlets
// (bounce-back scaled by the node's density, the amplitude and the profile; the entry's inlet word
// is its direction-0 link word) and the shifted pulls of outflows and free-slip walls
// (thelma_geometry::LinkRule).
template <typename S>
__device__ __forceinline__ void open_links(real* f, const S* __restrict__ a, const S* below_in,
                                           const S* above_in, const unsigned int* __restrict__ link,
                                           const real* __restrict__ term, int x, int y, int z,
                                           int nx, int ny, int nz, int periodic, int parity,
                                           size_t n, size_t p, const thelma_node<S>& node, int z0,
                                           int nz_domain) {
    real t[9];
    bool have = false;
    real rho = real(0.0), scale = real(0.0);
    bool have_rho = false;
#pragma unroll
    for (int i = 1; i < THELMA_Q; i++) {
        const unsigned int c = link[i];
        if (THELMA_LINK_KIND(c) == THELMA_LINK_ANTI_BOUNCE) {
            if (!have) {
                thelma_pressure_terms(node, term[i], t);
                have = true;
            }
            f[i] = -node[opp(i)] + t[(i - 1) / 2];
        } else if (THELMA_LINK_KIND(c) == THELMA_LINK_INLET) {
            if (!have_rho) {
                rho = thelma_node_density(node);
                scale = thelma_inlet_amplitude(link[0]);
                have_rho = true;
            }
            f[i] = node[opp(i)] +
                   rho * term[i] *
                       thelma_inlet_scale(link[0], scale, i, THELMA_GX(x), THELMA_GY(y), z0 + z,
                                          THELMA_NX_DOMAIN(nx), THELMA_NY_DOMAIN(ny), nz_domain);
        } else if (THELMA_LINK_KIND(c) == THELMA_LINK_SHIFT) {
            f[i] = value_at(a, below_in, above_in, THELMA_LINK_DIR(c), x + THELMA_LINK_OFFSET(c, 0),
                            y + THELMA_LINK_OFFSET(c, 1), z + THELMA_LINK_OFFSET(c, 2), nx, ny, nz,
                            periodic, parity, n);
        }
    }
}

// Pulls fluid node p's populations f̃_i(x − c_i) from lattice a (or an interface buffer) into f,
// bounced back where the palette's mask says so and, with OPEN, its open-face links where the
// palette marks them: everything before the collision.
template <typename S, bool OPEN>
__device__ __forceinline__ void pull_node(
    real* f, const S* __restrict__ a, unsigned int k, unsigned int mask,
    const real* __restrict__ pal_term, const unsigned int* __restrict__ pal_link,
    const S* below_in, const S* above_in, int nx, int ny, int nz, int periodic, int x, int y,
    int z, size_t p, int z0, int nz_domain, int parity) {
    const size_t plane = (size_t)nx * ny;
    const size_t n = plane * nz;
    // The source column of the three possible x offsets: wrapped across a periodic edge, clamped
    // in bounds beyond a wall, where the value is then replaced by zero (and bounce-back overrides
    // it). Selects, not branches, so that the warps holding x = 0 or x = nx − 1 do not diverge.
    const bool px = periodic & 1;
    const int xm = x > 0 ? x - 1 : (px ? nx - 1 : 0);
    const int xp = x < nx - 1 ? x + 1 : (px ? 0 : nx - 1);
    const bool okxm = x > 0 || px, okxp = x < nx - 1 || px;
    // y and z are uniform over a block: rows away from the y and z edges take the fast path,
    // whole blocks at once.
    const bool inner = y > 0 && y < ny - 1 && z > 0 && z < nz - 1;
#ifdef THELMA_GRID_X
    // In a grid's subdomain that cuts x, a node on an x side with a channel takes the fast path
    // too: what it pulls across that side comes from the channel's face (never an edge, away from
    // the y and z sides), through the same one load, its address selected, so that the warps
    // holding the x sides do not diverge (they took the edge path for their one node: a 2 × 1 × 1
    // grid ran at 71 % of one slab in f32, 48 % in f16; a fast path of their own, beside the
    // slabs' one, cost the f32 step more than it saved: PERFORMANCE.md). Grids that leave x whole
    // keep the slabs' fast path: the selects cost every warp. The channel is read through the
    // read-only cache: the buffer of parity ^ 1 is not written while the step runs (grids take
    // whole steps, never overlapped ones).
    const S* xm_in =
        x == 0 ? reinterpret_cast<const S*>(thelma_side_in[parity ^ 1][2]) : nullptr;
    const S* xp_in =
        x == nx - 1 ? reinterpret_cast<const S*>(thelma_side_in[parity ^ 1][3]) : nullptr;
    const size_t face = (size_t)ny * nz;
#endif
    if (inner) {
#pragma unroll
        for (int i = 0; i < THELMA_Q; i++) {
            const int dx = cx(i);
            const int xs = dx == 0 ? x : (dx == 1 ? xm : xp);
            bool okx = dx == 0 ? true : (dx == 1 ? okxm : okxp);
            const S* src = &a[(size_t)i * n + (size_t)(z - cz(i)) * plane +
                              (size_t)(y - cy(i)) * nx + xs];
#ifdef THELMA_GRID_X
            if (dx != 0) {
                const S* across = dx == 1 ? xm_in : xp_in;
                const size_t at = (size_t)thelma_x_slot(i, dx) * face +
                                  (size_t)(z - cz(i)) * ny + (y - cy(i));
                src = across != nullptr ? across + at : src;
                okx = okx || across != nullptr;
            }
#endif
            const real v = thelma_load(thelma_ldg(src));
            f[i] = okx ? v : real(0.0);
        }
    } else {
#pragma unroll
        for (int i = 0; i < THELMA_Q; i++) {
            const int dx = cx(i);
#ifdef THELMA_GRID
            f[i] = grid_value(a, i, x - dx, y - cy(i), z - cz(i), nx, ny, nz, periodic, parity, n);
#else
            const int xs = dx == 0 ? x : (dx == 1 ? xm : xp);
            const bool okx = dx == 0 ? true : (dx == 1 ? okxm : okxp);
            const real v = pull_edge(a, below_in, above_in, i, xs, y, z, nx, ny, nz, periodic, n);
            f[i] = okx ? v : real(0.0);
#endif
        }
    }
    if (mask != 0) {
#pragma unroll
        for (int i = 0; i < THELMA_Q; i++) {
            if (mask & (1u << i))
                f[i] = thelma_load(a[(size_t)opp(i) * n + p]) + pal_term[k * THELMA_Q + i];
        }
        if (OPEN && (mask & THELMA_OPEN_BIT)) {
            open_links(f, a, below_in, above_in, pal_link + k * THELMA_Q, pal_term + k * THELMA_Q,
                       x, y, z, nx, ny, nz, periodic, parity, n, p, thelma_node<S>{a + p, n}, z0,
                       nz_domain);
        }
    }
}

// Stores node p's populations to lattice b and, on a boundary layer, the crossing ones to this
// step's outgoing interface buffers (in a grid's subdomain, across every side: store_sides).
template <typename S>
__device__ __forceinline__ void store_node(const real* f, S* __restrict__ b, S* above_out,
                                           S* below_out, int nx, int ny, int nz, int x, int y,
                                           int z, size_t p, int parity) {
    const size_t plane = (size_t)nx * ny;
    const size_t n = plane * nz;
#pragma unroll
    for (int i = 0; i < THELMA_Q; i++) b[(size_t)i * n + p] = thelma_store<S>(f[i]);
#ifdef THELMA_GRID
    store_sides<S>(f, nx, ny, nz, x, y, z, parity);
    return;
#endif
    const size_t q = (size_t)y * nx + x;
    if (z == nz - 1 && above_out != nullptr) {
#pragma unroll
        for (int s = 0; s < THELMA_CROSSING; s++)
            above_out[(size_t)s * plane + q] = thelma_store<S>(f[up_dir(s)]);
    }
    if (z == 0 && below_out != nullptr) {
#pragma unroll
        for (int s = 0; s < THELMA_CROSSING; s++)
            below_out[(size_t)s * plane + q] = thelma_store<S>(f[down_dir(s)]);
    }
}

// The step of a case with immersed bodies (kernels/immersed.cu) takes their band: a bit a node of
// the slab (`ib_marks`, null when the module holds no body), the nodes' band slots and their
// forces, and the uniform force. A node of the band collides under the uniform force plus its own
// (summed in double, rounded once, as the coordinator's per-node force), and clears its bit for
// the next step's placing (its own bit only: the word's other nodes belong to other threads). The
// band's nodes were otherwise collided twice: by the step, then again by a kernel of their own
// over what the step stored.
#ifdef THELMA_IMMERSED
#define THELMA_IB_STEP_PARAM                                                                       \
    , unsigned int *ib_marks, const unsigned int *__restrict__ ib_slot,                            \
        const double *__restrict__ ib_force, double ib_fx, double ib_fy, double ib_fz
#define THELMA_IB_STEP_PASS , ib_marks, ib_slot, ib_force, ib_fx, ib_fy, ib_fz
#else
#define THELMA_IB_STEP_PARAM
#define THELMA_IB_STEP_PASS
#endif

// One step for one node: pull (pull_node), collide (solid nodes keep their populations), store
// (store_node). With OPEN, the node's open-face links too, where the palette marks them.
template <typename S, bool OPEN>
__device__ __forceinline__ void collide_propagate(
    const S* __restrict__ a, S* __restrict__ b, const thelma_index* __restrict__ index,
    const unsigned int* __restrict__ pal_mask, const real* __restrict__ pal_term,
    const unsigned int* __restrict__ pal_link, const S* below_in, const S* above_in, S* above_out,
    S* below_out, int nx, int ny, int nz, int periodic, int x, int y, int z, int z0,
    int nz_domain, int parity THELMA_IB_STEP_PARAM) {
    const size_t plane = (size_t)nx * ny;
    const size_t n = plane * nz;
    const size_t p = (size_t)z * plane + (size_t)y * nx + x;
    const unsigned int k = index[p];
    const unsigned int mask = pal_mask[k];
#ifdef THELMA_IMMERSED
    const bool banded = ib_marks != nullptr && ((ib_marks[p >> 5] >> (p & 31)) & 1u);
#endif
    real f[THELMA_Q];
    if (mask & THELMA_SOLID_BIT) {
#pragma unroll
        for (int i = 0; i < THELMA_Q; i++) f[i] = thelma_load(a[(size_t)i * n + p]);
    } else {
        pull_node<S, OPEN>(f, a, k, mask, pal_term, pal_link, below_in, above_in, nx, ny, nz,
                           periodic, x, y, z, p, z0, nz_domain, parity);
#ifdef THELMA_IMMERSED
        if (banded) {
            const size_t s = ib_slot[p];
            const real F[3] = {(real)(ib_fx + ib_force[3 * s]), (real)(ib_fy + ib_force[3 * s + 1]),
                               (real)(ib_fz + ib_force[3 * s + 2])};
            thelma_collide_forced(f, F, (real)0.0);
        } else
#endif
            thelma_collide(f);
#ifdef THELMA_SPONGE
        // The sponge layers of pressure outlets (a case with one steps with the open kernel).
        if (OPEN) thelma_sponge_absorb(f, THELMA_GX(x), THELMA_GY(y), z0 + z);
#endif
    }
    store_node(f, b, above_out, below_out, nx, ny, nz, x, y, z, p, parity);
#ifdef THELMA_IMMERSED
    if (banded) atomicAnd(&ib_marks[p >> 5], ~(1u << (p & 31)));
#endif
}

// A step's grid runs plane slots: slot 0 is plane 0, 1 plane nz − 1, and k ≥ 2 plane k − 1 (the
// two boundary layers first, then the interior in order: thelma_core's StepPart::slots). Blocks
// are dispatched roughly in grid order, so the slow zero-copy loads and stores of the interface
// overlap the interior's work instead of trailing it. The grid starts at slot 0 (the whole slab)
// in the kernels compiled without THELMA_SLOT_OFFSET, and at the argument slot0 in those compiled
// with it, which a cluster job's overlapped steps launch on the two boundary layers, then on the
// interior from 2. The plain kernels keep their slot exactly as before the offset: written with
// it, or through a function of the slot, the f16 MRT step lost 4–12 % on the H200 (PERFORMANCE.md).
#ifdef THELMA_SLOT_OFFSET
#define THELMA_SLOT_PARAM , int slot0
#define THELMA_STEP_SLOT ((int)blockIdx.z + slot0)
#else
#define THELMA_SLOT_PARAM
#define THELMA_STEP_SLOT blockIdx.z
#endif

#define THELMA_COLLIDE_ARGS                                                                        \
    const store_t *__restrict__ a, store_t *__restrict__ b,                                        \
        const thelma_index *__restrict__ index, const unsigned int *__restrict__ pal_mask,         \
        const real *__restrict__ pal_term, const store_t *below_in, const store_t *above_in,       \
        store_t *above_out, store_t *below_out, int nx, int ny, int nz,                           \
        int periodic THELMA_SLOT_PARAM THELMA_GRID_PARAM

extern "C" __global__ void __launch_bounds__(THELMA_BLOCK_X, THELMA_MIN_BLOCKS)
THELMA_COLLIDE_NAME(THELMA_COLLIDE_ARGS THELMA_IB_STEP_PARAM) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y;
    const int bz = THELMA_STEP_SLOT;
    const int z = bz == 0 ? 0 : (bz == 1 ? nz - 1 : bz - 1);
    if (x >= nx) return;
    collide_propagate<store_t, false>(a, b, index, pal_mask, pal_term, nullptr, below_in, above_in,
                                   above_out, below_out, nx, ny, nz, periodic, x, y, z, 0, nz,
                                   THELMA_PARITY THELMA_IB_STEP_PASS);
}

// The step of a case with open faces: the same grid and order, with the open-face links where the
// palette marks them; `z0` the slab's first plane in the domain of `nz_domain` planes (inlet
// profiles are in the domain's coordinates). A separate kernel so that closed cases keep the closed
// step's registers and schedule (the links inlined there cost a closed box 3.9 %). The open nodes'
// links stay inline: taken out into a call (`__noinline__`), the warps holding an x face ran both
// paths and the case lost a third of its speed (measured, PERFORMANCE.md).
extern "C" __global__ void __launch_bounds__(THELMA_BLOCK_X, THELMA_MIN_BLOCKS)
THELMA_COLLIDE_OPEN_NAME(THELMA_COLLIDE_ARGS, const unsigned int *__restrict__ pal_link, int z0,
                         int nz_domain THELMA_IB_STEP_PARAM) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y;
    const int bz = THELMA_STEP_SLOT;
    const int z = bz == 0 ? 0 : (bz == 1 ? nz - 1 : bz - 1);
    if (x >= nx) return;
    collide_propagate<store_t, true>(a, b, index, pal_mask, pal_term, pal_link, below_in,
                                  above_in, above_out, below_out, nx, ny, nz, periodic, x, y, z, z0,
                                  nz_domain, THELMA_PARITY THELMA_IB_STEP_PASS);
}

#ifdef THELMA_IN_PLACE
// In-place streaming: one lattice, the AA pattern. thelma_compute's cpu_inplace.rs (the CPU
// module's steps, which these follow node for node) says how the lattice is held between the two
// steps, why no slot is touched by two nodes, and why both equal the two-lattice step bit for bit.
// Solid nodes are never read or written. The exchange is the two-lattice one in both steps.

// Stores node p's collided populations where the pull step puts them: f̃_i into slot ī of node
// x + c_i, or into the node's own slot i where that neighbour is a wall (the bounce-back of link ī
// reads it there) or across the slab's z faces (the outgoing buffer carries it, below); and the
// crossing ones into this step's outgoing buffers.
template <typename S>
__device__ __forceinline__ void scatter_node(const real* f, S* a, unsigned int mask, S* above_out,
                                             S* below_out, int nx, int ny, int nz, int periodic,
                                             int x, int y, int z, size_t p) {
    const size_t plane = (size_t)nx * ny;
    const size_t n = plane * nz;
    // Rows away from the y and z edges (uniform over a block): every target is inside the slab
    // but for the x faces and the walls, which selects choose, so that no warp diverges (a warp
    // holding x = 0 or a wall node ran the general path below for its one node, and the step took
    // a fifth longer: 839 µs against 701 at 256³ in f16).
    if (y > 0 && y < ny - 1 && z > 0 && z < nz - 1) {
        // With 16-bit storage, nodes away from the x faces and walls store at constant offsets
        // (measured 1.5–4 % faster in f16; in f32 as fast or 1 % slower, so not there).
        if (sizeof(S) == 2 && mask == 0 && x > 0 && x < nx - 1) {
#pragma unroll
            for (int i = 0; i < THELMA_Q; i++)
                a[(size_t)opp(i) * n + p + (long long)(cx(i) + cy(i) * nx) +
                  cz(i) * (long long)plane] = thelma_store<S>(f[i]);
            return;
        }
        const bool px = periodic & 1;
        const int xm = x > 0 ? x - 1 : (px ? nx - 1 : -1);
        const int xp = x < nx - 1 ? x + 1 : (px ? 0 : -1);
#pragma unroll
        for (int i = 0; i < THELMA_Q; i++) {
            const int xt = cx(i) == 0 ? x : (cx(i) == 1 ? xp : xm);
            const bool own = i == 0 || (mask & (1u << opp(i))) || xt < 0;
            const size_t dst =
                own ? (size_t)i * n + p
                    : (size_t)opp(i) * n + p + (long long)(xt - x + cy(i) * nx) +
                          cz(i) * (long long)plane;
            a[dst] = thelma_store<S>(f[i]);
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < THELMA_Q; i++) {
        size_t dst = (size_t)i * n + p;
        if (i != 0 && !(mask & (1u << opp(i)))) {
            int xt = x + cx(i), yt = y + cy(i);
            const int zt = z + cz(i);
            bool inside = zt >= 0 && zt < nz;
            if (xt < 0 || xt >= nx) {
                if (periodic & 1) xt = (xt + nx) % nx;
                else inside = false;
            }
            if (yt < 0 || yt >= ny) {
                if (periodic & 2) yt = (yt + ny) % ny;
                else inside = false;
            }
            if (inside) dst = (size_t)opp(i) * n + (size_t)zt * plane + (size_t)yt * nx + xt;
        }
        a[dst] = thelma_store<S>(f[i]);
    }
    const size_t q = (size_t)y * nx + x;
    if (z == nz - 1 && above_out != nullptr) {
#pragma unroll
        for (int s = 0; s < THELMA_CROSSING; s++)
            above_out[(size_t)s * plane + q] = thelma_store<S>(f[up_dir(s)]);
    }
    if (z == 0 && below_out != nullptr) {
#pragma unroll
        for (int s = 0; s < THELMA_CROSSING; s++)
            below_out[(size_t)s * plane + q] = thelma_store<S>(f[down_dir(s)]);
    }
}

// What node p reads in the local step: f_j from its own slot j̄ (bounced links add their term), or
// from the neighbour's buffer where j arrives across the slab's z face.
template <typename S>
__device__ __forceinline__ void arrive_node(real* f, const S* a, unsigned int k, unsigned int mask,
                                            const real* __restrict__ pal_term, const S* below_in,
                                            const S* above_in, int nx, int ny, int nz,
                                            int periodic, int x, int y, int z, size_t p) {
    const size_t plane = (size_t)nx * ny;
    const size_t n = plane * nz;
    // Rows away from the slab's z faces (uniform over a block) read only the node's own slots, one
    // load after another with no branch between them, so that all are in flight at once (with a
    // branch per direction each load waited for the one before: the f16 step took twice as long).
    // Through the read-only cache, as the pull does: no other node writes these slots, and this
    // one writes them only after reading them (measured 1.5 % faster than a plain load).
    if (z > 0 && z < nz - 1) {
#pragma unroll
        for (int j = 0; j < THELMA_Q; j++)
            f[j] = thelma_load(thelma_ldg(&a[(size_t)opp(j) * n + p]));
    } else {
#pragma unroll
        for (int j = 0; j < THELMA_Q; j++) {
            const int zs = z - cz(j);
            const S* buf = zs < 0 ? below_in : (zs >= nz ? above_in : nullptr);
            if (buf != nullptr && !(mask & (1u << j))) {
                int xs = x - cx(j), ys = y - cy(j);
                bool inside = true;
                if (xs < 0 || xs >= nx) {
                    if (periodic & 1) xs = (xs + nx) % nx;
                    else inside = false;
                }
                if (ys < 0 || ys >= ny) {
                    if (periodic & 2) ys = (ys + ny) % ny;
                    else inside = false;
                }
                f[j] = inside ? thelma_load(buf[(size_t)slot_of(j) * plane + (size_t)ys * nx + xs])
                              : real(0.0);
            } else {
                f[j] = thelma_load(thelma_ldg(&a[(size_t)opp(j) * n + p]));
            }
        }
    }
    // Bounced links: the node's own slot j̄ (loaded above) plus the link's term.
    if (mask != 0) {
#pragma unroll
        for (int j = 0; j < THELMA_Q; j++)
            if (mask & (1u << j)) f[j] = f[j] + pal_term[k * THELMA_Q + j];
    }
}

#define THELMA_IN_PLACE_ARGS                                                                       \
    store_t *a, const thelma_index *__restrict__ index, const unsigned int *__restrict__ pal_mask, \
        const real *__restrict__ pal_term, const store_t *below_in, const store_t *above_in,       \
        store_t *above_out, store_t *below_out, int nx, int ny, int nz, int periodic THELMA_SLOT_PARAM

// The pull step (the lattice held Own → Streamed): the two-lattice pull, then scatter_node. The
// grid and block order of the two-lattice step. The pull loads through the read-only cache a
// lattice this kernel writes: each slot it reads is written by no other node, and by this one only
// after the read (a clamped x-edge load may see a neighbour's write, and is discarded).
extern "C" __global__ void __launch_bounds__(THELMA_BLOCK_X, THELMA_MIN_BLOCKS)
THELMA_PULL_IN_PLACE_NAME(THELMA_IN_PLACE_ARGS) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y;
    const int bz = THELMA_STEP_SLOT;
    const int z = bz == 0 ? 0 : (bz == 1 ? nz - 1 : bz - 1);
    if (x >= nx) return;
    const size_t plane = (size_t)nx * ny;
    const size_t p = (size_t)z * plane + (size_t)y * nx + x;
    const unsigned int k = index[p];
    const unsigned int mask = pal_mask[k];
    if (mask & THELMA_SOLID_BIT) return;
    real f[THELMA_Q];
    pull_node<store_t, false>(f, a, k, mask, pal_term, nullptr, below_in, above_in, nx, ny, nz,
                              periodic, x, y, z, p, 0, nz, 0);
    thelma_collide(f);
    scatter_node(f, a, mask, above_out, below_out, nx, ny, nz, periodic, x, y, z, p);
}

// The local step (Streamed → Own): arrive_node, then the two-lattice store into the node's own
// slots.
extern "C" __global__ void __launch_bounds__(THELMA_BLOCK_X, THELMA_MIN_BLOCKS)
THELMA_LOCAL_IN_PLACE_NAME(THELMA_IN_PLACE_ARGS) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y;
    const int bz = THELMA_STEP_SLOT;
    const int z = bz == 0 ? 0 : (bz == 1 ? nz - 1 : bz - 1);
    if (x >= nx) return;
    const size_t plane = (size_t)nx * ny;
    const size_t p = (size_t)z * plane + (size_t)y * nx + x;
    const unsigned int k = index[p];
    const unsigned int mask = pal_mask[k];
    if (mask & THELMA_SOLID_BIT) return;
    real f[THELMA_Q];
    arrive_node(f, a, k, mask, pal_term, below_in, above_in, nx, ny, nz, periodic, x, y, z, p);
    thelma_collide(f);
    store_node(f, a, above_out, below_out, nx, ny, nz, x, y, z, p, 0);
}

// Swaps each fluid node's slot i with slot ī of node x + c_i, for the directions with ī > i,
// where that neighbour is inside the slab and not a wall: Streamed ↔ Own (each pair of slots has
// one owner). One thread per node.
extern "C" __global__ void __launch_bounds__(256)
THELMA_NAME(swap_in_place_d3q19)(store_t *a, const thelma_index *__restrict__ index,
                                 const unsigned int *__restrict__ pal_mask, int nx, int ny, int nz,
                                 int periodic) {
    const size_t plane = (size_t)nx * ny;
    const size_t n = plane * nz;
    for (size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x; p < n;
         p += (size_t)gridDim.x * blockDim.x) {
        const unsigned int mask = pal_mask[index[p]];
        if (mask & THELMA_SOLID_BIT) continue;
        const int x = (int)(p % nx), y = (int)((p / nx) % ny), z = (int)(p / plane);
#pragma unroll
        for (int i = 1; i < THELMA_Q; i++) {
            if (opp(i) < i || (mask & (1u << opp(i)))) continue;
            int xt = x + cx(i), yt = y + cy(i);
            const int zt = z + cz(i);
            if (zt < 0 || zt >= nz) continue;
            if (xt < 0 || xt >= nx) {
                if (!(periodic & 1)) continue;
                xt = (xt + nx) % nx;
            }
            if (yt < 0 || yt >= ny) {
                if (!(periodic & 2)) continue;
                yt = (yt + ny) % ny;
            }
            const size_t u = (size_t)i * n + p;
            const size_t v = (size_t)opp(i) * n + (size_t)zt * plane + (size_t)yt * nx + xt;
            const store_t t = a[u];
            a[u] = a[v];
            a[v] = t;
        }
    }
}
#endif

// Copies the crossing populations of the slab's top layer (c_z = +1) into up_out and of its bottom
// layer (c_z = −1) into down_out: how attach and write_populations publish a state the next step reads.
extern "C" __global__ void THELMA_NAME(export_faces_d3q19)(const store_t *__restrict__ a,
                                                           store_t *up_out, store_t *down_out,
                                                           int nx, int ny, int nz) {
    const size_t plane = (size_t)nx * ny;
    const size_t n = plane * nz;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < plane;
         q += (size_t)gridDim.x * blockDim.x) {
#pragma unroll
        for (int s = 0; s < THELMA_CROSSING; s++) {
            if (up_out != nullptr)
                up_out[(size_t)s * plane + q] = a[(size_t)up_dir(s) * n + (size_t)(nz - 1) * plane + q];
            if (down_out != nullptr) down_out[(size_t)s * plane + q] = a[(size_t)down_dir(s) * n + q];
        }
    }
}

#ifdef THELMA_GRID
// A grid subdomain's export: the crossing populations of every node on a side of the box into the
// buffers `parity` of the channels written across its sides, as the step stores them.
extern "C" __global__ void THELMA_NAME(export_sides_d3q19)(const store_t *__restrict__ a, int nx,
                                                           int ny, int nz, int parity) {
    const size_t n = (size_t)nx * ny * nz;
    for_side_nodes(nx, ny, nz, [&](size_t p, int x, int y, int z) {
        real f[THELMA_Q];
#pragma unroll
        for (int i = 0; i < THELMA_Q; i++) f[i] = thelma_load(a[(size_t)i * n + p]);
        store_sides<store_t>(f, nx, ny, nz, x, y, z, parity);
    });
}
#endif

// The NQ populations of lattice a (NQ per node, stride n) at each of `count` slab-local nodes into
// out[k·NQ + i], one thread per node: the gather kernels of the flow and the temperature lattice.
template <int NQ, typename S>
__device__ __forceinline__ void gather_nodes(const S *__restrict__ a,
                                             const unsigned int *__restrict__ nodes, int count,
                                             unsigned long long n, S *out) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= count) return;
    const size_t p = nodes[k];
#pragma unroll
    for (int i = 0; i < NQ; i++) out[(size_t)k * NQ + i] = a[(size_t)i * n + p];
}

// The Q populations of each of `count` slab-local nodes into out[k·Q + i]: what forces on bodies and
// probes are computed from on the host.
extern "C" __global__ void THELMA_NAME(gather_nodes_d3q19)(const store_t *__restrict__ a,
                                                           const unsigned int *__restrict__ nodes,
                                                           int count, unsigned long long n,
                                                           store_t *out) {
    gather_nodes<THELMA_Q>(a, nodes, count, n, out);
}

// The watchdog: per block, the smallest and largest density 1 + Σ g of finite fluid nodes (summed in
// double, as the CPU module does) and the smallest index of a fluid node with a non-finite population.
// out[3·block + 0..3] = min, max, first bad index (−1 when none).
extern "C" __global__ void __launch_bounds__(256)
THELMA_NAME(health_d3q19)(const store_t *__restrict__ a, const thelma_index *__restrict__ index,
                          const unsigned int *__restrict__ pal_mask, unsigned long long n,
                          double *out) {
    __shared__ double smin[256];
    __shared__ double smax[256];
    __shared__ unsigned long long sbad[256];
    double lo = __longlong_as_double(0x7ff0000000000000ll), hi = -lo;
    unsigned long long bad = ~0ull;
    for (unsigned long long p = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; p < n;
         p += (unsigned long long)gridDim.x * blockDim.x) {
        if (pal_mask[index[p]] & THELMA_SOLID_BIT) continue;
        double drho = 0.0;
        bool finite = true;
#pragma unroll
        for (int i = 0; i < THELMA_Q; i++) {
            const double v = (double)thelma_load(a[(size_t)i * n + p]);
            finite = finite && isfinite(v);
            drho += v;
        }
        if (finite) {
            lo = fmin(lo, 1.0 + drho);
            hi = fmax(hi, 1.0 + drho);
        } else if (p < bad) {
            bad = p;
        }
    }
    smin[threadIdx.x] = lo;
    smax[threadIdx.x] = hi;
    sbad[threadIdx.x] = bad;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            smin[threadIdx.x] = fmin(smin[threadIdx.x], smin[threadIdx.x + s]);
            smax[threadIdx.x] = fmax(smax[threadIdx.x], smax[threadIdx.x + s]);
            sbad[threadIdx.x] = min(sbad[threadIdx.x], sbad[threadIdx.x + s]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[3 * blockIdx.x] = smin[0];
        out[3 * blockIdx.x + 1] = smax[0];
        out[3 * blockIdx.x + 2] = sbad[0] == ~0ull ? -1.0 : (double)sbad[0];
    }
}

// The convergence measure: per fluid node the velocity the host would read (thelma_velocity, printed
// from thelma_core::physics::stored_macroscopic), |u − u_prev|² (when `compare`) and |u|² accumulated in
// double per block, and u stored into u_prev ([axis][node], so that a warp's stores are contiguous)
// for the next measure. The per-node terms use the _rn intrinsics, which are never contracted into
// fused multiply-adds, so that each equals the host's sum of squares bit for bit and only the order
// of the sums differs. out[2·block + 0..2] = Σ|u − u_prev|², Σ|u|².
extern "C" __global__ void __launch_bounds__(256)
THELMA_NAME(velocity_change_d3q19)(const store_t *__restrict__ a,
                                   const thelma_index *__restrict__ index,
                                   const unsigned int *__restrict__ pal_mask, unsigned long long n,
                                   real *__restrict__ u_prev, int compare, double *out) {
    __shared__ double sdiff[256];
    __shared__ double snorm[256];
    double diff = 0.0, norm = 0.0;
    for (unsigned long long p = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; p < n;
         p += (unsigned long long)gridDim.x * blockDim.x) {
        if (pal_mask[index[p]] & THELMA_SOLID_BIT) continue;
        real u[3];
        thelma_velocity(thelma_node<store_t>{a + p, (size_t)n}, u);
        const double ux = (double)u[0], uy = (double)u[1], uz = (double)u[2];
        if (compare) {
            const double dx = __dsub_rn(ux, (double)u_prev[p]);
            const double dy = __dsub_rn(uy, (double)u_prev[n + p]);
            const double dz = __dsub_rn(uz, (double)u_prev[2 * n + p]);
            diff += __dadd_rn(__dadd_rn(__dmul_rn(dx, dx), __dmul_rn(dy, dy)), __dmul_rn(dz, dz));
        }
        norm += __dadd_rn(__dadd_rn(__dmul_rn(ux, ux), __dmul_rn(uy, uy)), __dmul_rn(uz, uz));
        u_prev[p] = u[0];
        u_prev[n + p] = u[1];
        u_prev[2 * n + p] = u[2];
    }
    sdiff[threadIdx.x] = diff;
    snorm[threadIdx.x] = norm;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            sdiff[threadIdx.x] += sdiff[threadIdx.x + s];
            snorm[threadIdx.x] += snorm[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[2 * blockIdx.x] = sdiff[0];
        out[2 * blockIdx.x + 1] = snorm[0];
    }
}

// Node p's fields as the host reads them: ρ = 1 + δρ (thelma_density_excess, in double), u
// (thelma_velocity; with a temperature lattice `h`, thelma_stored_velocity under the buoyancy at
// its θ besides the uniform force, as thelma_compute's read_fields) and θ (thelma_temperature; 0
// without a temperature lattice): what the time average and the live view's plane take.
__device__ __forceinline__ void host_fields(const store_t *__restrict__ a,
                                            const store_t *__restrict__ h, size_t p, size_t n,
                                            double *rho, real *u, real *theta) {
    const thelma_node<store_t> g{a + p, n};
#ifdef THELMA_THERMAL
    real hp[THELMA_QT], F[3];
#pragma unroll
    for (int i = 0; i < THELMA_QT; i++) hp[i] = thelma_tload(h[(size_t)i * n + p]);
    thelma_temperature(hp, theta);
    thelma_coupled_force(theta[0], F);
    thelma_stored_velocity(g, F, u);
#else
    thelma_velocity(g, u);
    theta[0] = real(0.0);
#endif
    *rho = 1.0 + (double)thelma_density_excess(g);
}

// The time average's sample: per fluid node ρ, u and θ as the host reads them (host_fields), each
// widened to double and added to its running sum in `sums` ([field][node]: ρ, u_x, u_y, u_z, θ),
// as MeanSums::add adds them on the host.
extern "C" __global__ void __launch_bounds__(256)
THELMA_NAME(accumulate_means_d3q19)(const store_t *__restrict__ a, const store_t *__restrict__ h,
                                    const thelma_index *__restrict__ index,
                                    const unsigned int *__restrict__ pal_mask,
                                    unsigned long long n, double *__restrict__ sums) {
    for (unsigned long long p = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; p < n;
         p += (unsigned long long)gridDim.x * blockDim.x) {
        if (pal_mask[index[p]] & THELMA_SOLID_BIT) continue;
        double rho;
        real u[3], theta[1];
        host_fields(a, h, p, n, &rho, u, theta);
#ifdef THELMA_THERMAL
        sums[4 * n + p] += (double)theta[0];
#endif
        sums[p] += rho;
        sums[n + p] += (double)u[0];
        sums[2 * n + p] += (double)u[1];
        sums[3 * n + p] += (double)u[2];
    }
}

// The live view's plane: per node of the plane normal to `axis` at slab-local `index` (row-major
// over the plane's two other axes in increasing order, the first fastest), ρ, u and θ as the host
// reads them (host_fields), rounded to float into
// out[field·count + k] (ρ, u_x, u_y, u_z, θ); solid nodes get zeros. One thread per node of the
// plane: a picture's worth of work, into a buffer the module keeps.
extern "C" __global__ void __launch_bounds__(256)
THELMA_NAME(plane_d3q19)(const store_t *__restrict__ a, const store_t *__restrict__ h,
                         const thelma_index *__restrict__ index,
                         const unsigned int *__restrict__ pal_mask, int nx, int ny, int nz,
                         int axis, int at, float *__restrict__ out) {
    const int sa = axis == 0 ? ny : nx;
    const int sb = axis == 2 ? ny : nz;
    const int count = sa * sb;
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= count) return;
    const int i = k % sa, j = k / sa;
    const int x = axis == 0 ? at : i;
    const int y = axis == 1 ? at : (axis == 0 ? i : j);
    const int z = axis == 2 ? at : j;
    const size_t n = (size_t)nx * ny * nz;
    const size_t p = ((size_t)z * ny + y) * nx + x;
    float rho = 0.0f, ux = 0.0f, uy = 0.0f, uz = 0.0f, t = 0.0f;
    if (!(pal_mask[index[p]] & THELMA_SOLID_BIT)) {
        double r;
        real u[3], theta[1];
        host_fields(a, h, p, n, &r, u, theta);
        rho = (float)r;
        ux = (float)u[0];
        uy = (float)u[1];
        uz = (float)u[2];
        t = (float)theta[0];
    }
    out[k] = rho;
    out[count + k] = ux;
    out[2 * count + k] = uy;
    out[3 * count + k] = uz;
    out[4 * count + k] = t;
}
