// The temperature lattice of thelma (D3Q7) fused into the flow's step: one kernel pulls a node's
// thermal populations, takes θ and so the force the flow collides with, pulls the flow's
// populations, advects θ with their velocity under that force, and stores both lattices. Compiled
// after kernels/lbm_d3q19.cu (whose pull and store it calls) when the case has a temperature
// lattice; the prelude then defines THELMA_THERMAL and the functions printed from
// thelma_core::physics (thelma_temperature, thelma_coupled_force, thelma_advecting_velocity,
// thelma_eddy_viscosity, thelma_collide_thermal), the flow's collision under a per-node force
// (thelma_collide_forced) and the faces' closures (thelma_tface: the kinds as literals, the held
// faces' anti-bounce-back terms through thelma_held: literals too, or, in a run served live, the
// constant table thelma_held_term, which the module fills from the held θ, and fills again when
// the live view steers one between steps). Per node this is
// the CPU module's order (thelma-compute/src/cpu_thermal.rs):
// thermal pull, force, flow pull, advecting velocity and eddy viscosity, both collisions.
//
// Layout: h[i][z][y][x] as the flow's lattice, directions 0–6 those of D3Q19 (rest, ±x, ±y, ±z),
// stored as the flow's populations are (`store_t`) under the case's store scale: loaded by
// thelma_tload/thelma_tldg and stored by thelma_tstore (thelma_core::physics::load_thermal,
// store_thermal); the interface buffers carry the stored values.
// The interface buffers carry θ's crossing population (direction 5 up, 6 down) in the plane after
// the flow's THELMA_CROSSING ones; in a grid's subdomain (THELMA_GRID), every face's channel
// carries it after the flow's (edges carry none: no D3Q7 direction crosses one).

#ifdef THELMA_THERMAL

#ifdef THELMA_GRID
// The offset of box node (x, y, z) in the thermal slot of the channel across a face of axis `ax`
// (the face's nodes, x fastest along its free axes, after the flow's THELMA_CROSSING slots).
__device__ __forceinline__ size_t thermal_face_offset(int ax, int x, int y, int z, int nx, int ny,
                                                      int nz) {
    size_t m;
    const size_t off = side_offset(ax == 0, ax == 1, ax == 2, x, y, z, nx, ny, nz, &m);
    return (size_t)THELMA_CROSSING * m + off;
}

// Stores θ's population leaving the box across each face whose layer holds node (x, y, z) into
// this step's buffer written across it: direction 6, 5, 2, 1, 4, 3 across z−, z+, x−, x+, y−, y+
// (`hs`: the node's stored populations).
__device__ __forceinline__ void store_thermal_sides(const store_t* hs, int nx, int ny, int nz,
                                                    int x, int y, int z, int parity) {
#pragma unroll
    for (int s = 0; s < 6; s++) {
        const int ax = s < 2 ? 2 : (s - 2) / 2;
        const bool up = s % 2 == 1;
        const int coord = ax == 0 ? x : (ax == 1 ? y : z);
        const int size = ax == 0 ? nx : (ax == 1 ? ny : nz);
        store_t* out = reinterpret_cast<store_t*>(thelma_side_out[parity][s]);
        if (coord != (up ? size - 1 : 0) || out == nullptr) continue;
        const int i = s < 2 ? (up ? 5 : 6) : (up ? 2 * ax + 1 : 2 * ax + 2);
        out[thermal_face_offset(ax, x, y, z, nx, ny, nz)] = hs[i];
    }
}
#endif

// Pulls fluid node p's thermal populations h̃_i(x − c_i) from lattice ha into h: across a box
// face its closure (adiabatic: bounce-back; held: anti-bounce-back to the face's θ; outflow: the
// node's own), from an obstacle bounce-back (the flow's mask bit), across a slab face the
// neighbour's interface plane, elsewhere the neighbour (wrapped on periodic x and y). The node's
// own populations are loaded only where a rule needs them.
__device__ __forceinline__ void pull_thermal(real* h, const store_t* __restrict__ ha,
                                             const store_t* below_in, const store_t* above_in,
                                             unsigned int mask, int nx, int ny, int nz,
                                             int periodic, int x, int y, int z, int z0, size_t p,
                                             int parity) {
    const size_t plane = (size_t)nx * ny;
    const size_t n = plane * nz;
    h[0] = thelma_tload(ha[p]);
#pragma unroll
    for (int i = 1; i < THELMA_QT; i++) {
        const int ax = (i - 1) / 2;
        const int c = ax == 0 ? cx(i) : (ax == 1 ? cy(i) : cz(i));
        const int coord = ax == 0 ? x : (ax == 1 ? y : z);
        const int size = ax == 0 ? nx : (ax == 1 ? ny : nz);
        const int q = coord - c;
        const bool outside = q < 0 || q >= size;
#ifdef THELMA_GRID
        // Across any face with a channel (z−, z+, x−, x+, y−, y+ are sides 0–5).
        const int side = (ax == 2 ? 0 : 2 * ax + 2) + (q < 0 ? 0 : 1);
        const store_t* buf =
            outside ? reinterpret_cast<const store_t*>(thelma_side_in[parity ^ 1][side]) : nullptr;
        const bool across = buf != nullptr;
#else
        const bool across = ax == 2 && outside;
        const store_t* buf = q < 0 ? below_in : above_in;
#endif
        const bool wraps = ax < 2 && ((periodic >> ax) & 1);
        real v;
        if (outside && !wraps && !(across && buf != nullptr)) {
            // The face is a constant after unrolling on either side (its table entries and
            // patches fold): a face index computed at run time would read the tables from local
            // memory.
            int kind;
            real term;
            if (q < 0) {
                thelma_tface(2 * ax, THELMA_GX(x), THELMA_GY(y), z0 + z, &kind, &term);
            } else {
                thelma_tface(2 * ax + 1, THELMA_GX(x), THELMA_GY(y), z0 + z, &kind, &term);
            }
            if (kind == 0) {
                v = thelma_tload(ha[(size_t)opp(i) * n + p]);
            } else if (kind == 1) {
                // The held term: thelma_core::physics::dirichlet_term of the held θ, from the module.
                v = -thelma_tload(ha[(size_t)opp(i) * n + p]) + term;
            } else {
                v = thelma_tload(ha[(size_t)i * n + p]);
            }
        } else if (mask & (1u << i)) {
            v = thelma_tload(ha[(size_t)opp(i) * n + p]);
        } else if (across) {
#ifdef THELMA_GRID
            v = thelma_tload(buf[thermal_face_offset(ax, x, y, z, nx, ny, nz)]);
#else
            v = thelma_tload(buf[(size_t)y * nx + x]);
#endif
        } else {
            const int xs = ax == 0 ? (q + nx) % nx : x;
            const int ys = ax == 1 ? (q + ny) % ny : y;
            const int zs = ax == 2 ? q : z;
            v = thelma_tldg(&ha[(size_t)i * n + (size_t)zs * plane + (size_t)ys * nx + xs]);
        }
        h[i] = v;
    }
}

// Stores node p's stored thermal populations `hs` to lattice hb and, on a boundary layer, the
// crossing one to the thermal plane of this step's outgoing interface buffer.
__device__ __forceinline__ void store_thermal(const store_t* hs, store_t* __restrict__ hb,
                                              store_t* above_out, store_t* below_out, int nx,
                                              int ny, int nz, int x, int y, int z, size_t p,
                                              int parity) {
    const size_t plane = (size_t)nx * ny;
    const size_t n = plane * nz;
#pragma unroll
    for (int i = 0; i < THELMA_QT; i++) hb[(size_t)i * n + p] = hs[i];
#ifdef THELMA_GRID
    store_thermal_sides(hs, nx, ny, nz, x, y, z, parity);
    return;
#endif
    const size_t q = (size_t)y * nx + x;
    if (z == nz - 1 && above_out != nullptr) above_out[q] = hs[5];
    if (z == 0 && below_out != nullptr) below_out[q] = hs[6];
}

// The coupled step of a case with a temperature lattice: collide-open's arguments (open-face links
// where the palette marks them), then the thermal lattices ha (current) and hb (written). The
// thermal populations are collided and stored before the flow's collision, so that they and the
// advecting velocity are no longer held while it runs.
extern "C" __global__ void __launch_bounds__(THELMA_BLOCK_X, THELMA_MIN_BLOCKS)
THELMA_COLLIDE_THERMAL_NAME(THELMA_COLLIDE_ARGS, const unsigned int *__restrict__ pal_link,
                            int z0, int nz_domain, const store_t *__restrict__ ha,
                            store_t *__restrict__ hb) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y;
    const int bz = THELMA_STEP_SLOT;
    const int z = bz == 0 ? 0 : (bz == 1 ? nz - 1 : bz - 1);
    if (x >= nx) return;
    const size_t plane = (size_t)nx * ny;
    const size_t n = plane * nz;
    const size_t p = (size_t)z * plane + (size_t)y * nx + x;
    const size_t thermal = (size_t)THELMA_CROSSING * plane;
    const store_t *tbelow_in = below_in != nullptr ? below_in + thermal : nullptr;
    const store_t *tabove_in = above_in != nullptr ? above_in + thermal : nullptr;
    store_t *tabove_out = above_out != nullptr ? above_out + thermal : nullptr;
    store_t *tbelow_out = below_out != nullptr ? below_out + thermal : nullptr;
    const unsigned int k = index[p];
    const unsigned int mask = pal_mask[k];
    real f[THELMA_Q];
    {
        real h[THELMA_QT];
        store_t hs[THELMA_QT];
        if (mask & THELMA_SOLID_BIT) {
#pragma unroll
            for (int i = 0; i < THELMA_QT; i++) hs[i] = ha[(size_t)i * n + p];
            store_thermal(hs, hb, tabove_out, tbelow_out, nx, ny, nz, x, y, z, p, THELMA_PARITY);
#pragma unroll
            for (int i = 0; i < THELMA_Q; i++) f[i] = thelma_load(a[(size_t)i * n + p]);
        } else {
            pull_thermal(h, ha, tbelow_in, tabove_in, mask, nx, ny, nz, periodic, x, y, z, z0, p,
                         THELMA_PARITY);
            real theta[1];
            thelma_temperature(h, theta);
            real F[3];
            thelma_coupled_force(theta[0], F);
            pull_node<store_t, true>(f, a, k, mask, pal_term, pal_link, below_in, above_in, nx, ny,
                                     nz, periodic, x, y, z, p, z0, nz_domain, THELMA_PARITY);
            real u[3];
            thelma_advecting_velocity(f, F, u);
            // The eddy viscosity's relaxation time, evaluated once for both collisions.
            real nut[1], tau[1];
            thelma_eddy_viscosity(f, F, nut, tau);
            thelma_collide_thermal(h, u, nut[0]);
#pragma unroll
            for (int i = 0; i < THELMA_QT; i++) hs[i] = thelma_tstore(h[i]);
            store_thermal(hs, hb, tabove_out, tbelow_out, nx, ny, nz, x, y, z, p, THELMA_PARITY);
            thelma_collide_forced(f, F, tau[0]);
#ifdef THELMA_SPONGE
            thelma_sponge_absorb(f, THELMA_GX(x), THELMA_GY(y), z0 + z);
#endif
        }
    }
    store_node(f, b, above_out, below_out, nx, ny, nz, x, y, z, p, THELMA_PARITY);
}

// Copies the crossing thermal populations of lattice h's top layer (direction 5) and bottom layer
// (direction 6) into the thermal planes of up_out and down_out (interface buffers, null: skipped):
// how attach and write_populations publish a state the next step reads.
extern "C" __global__ void THELMA_NAME(export_faces_d3q7)(const store_t *__restrict__ h,
                                                          store_t *up_out, store_t *down_out,
                                                          int nx, int ny, int nz) {
    const size_t plane = (size_t)nx * ny;
    const size_t n = plane * nz;
    const size_t thermal = (size_t)THELMA_CROSSING * plane;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < plane;
         q += (size_t)gridDim.x * blockDim.x) {
        if (up_out != nullptr) up_out[thermal + q] = h[5 * n + (size_t)(nz - 1) * plane + q];
        if (down_out != nullptr) down_out[thermal + q] = h[6 * n + q];
    }
}

#ifdef THELMA_GRID
// A grid subdomain's thermal export: θ's population leaving the box across each face into the
// buffers `parity` of the channels written across it, as the step stores it.
extern "C" __global__ void THELMA_NAME(export_sides_d3q7)(const store_t *__restrict__ h, int nx,
                                                          int ny, int nz, int parity) {
    const size_t n = (size_t)nx * ny * nz;
    for_side_nodes(nx, ny, nz, [&](size_t p, int x, int y, int z) {
        store_t v[THELMA_QT];
#pragma unroll
        for (int i = 0; i < THELMA_QT; i++) v[i] = h[(size_t)i * n + p];
        store_thermal_sides(v, nx, ny, nz, x, y, z, parity);
    });
}
#endif

// The 7 thermal populations of each of `count` slab-local nodes into out[k·7 + i] (probes'
// temperature), as stored, as gather_nodes_d3q19 does for the flow's.
extern "C" __global__ void THELMA_NAME(gather_nodes_d3q7)(const store_t *__restrict__ h,
                                                          const unsigned int *__restrict__ nodes,
                                                          int count, unsigned long long n,
                                                          store_t *out) {
    gather_nodes<THELMA_QT>(h, nodes, count, n, out);
}

#endif
