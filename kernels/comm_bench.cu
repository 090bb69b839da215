// Exchange kernel of `thelma comm-bench` (Obrecht et al. 2011, §6): the interface exchange of the
// solver with the collision taken out. Each launch serves every link side of one device: it stores
// this iteration's k arrays of L x L words into the outgoing buffer (parity t % 2, chosen by the
// host) and loads the words its neighbour stored in the previous iteration from the incoming buffer
// (parity (t + 1) % 2), counting every word that differs from what the neighbour must have written.
// The check keeps the loads from being optimised away and proves that the protocol delivers.
//
// Grid: x covers the L columns of one row, y the k * L rows (array a, row y), z the device's sides
// (one or two). With `transpose`, element (a, y, x) lives at (a, x, y): consecutive threads then
// touch words L apart, so the zero-copy and peer transactions are no longer coalesced.

// The word stored at logical index `i` of stream `stream` (link * 2 + direction) at `iteration`.
// The same function is `thelma_compute::comm_bench::protocol::pattern`; the two must agree.
__device__ __forceinline__ unsigned int pattern(unsigned int iteration, unsigned int stream,
                                                unsigned int i) {
    unsigned int h = (iteration * 0x9E3779B9u) ^ (stream * 0x85EBCA6Bu);
    return h ^ (i * 0xC2B2AE35u);
}

extern "C" __global__ void comm_exchange(unsigned int* out0, const unsigned int* in0,
                                         unsigned int* out1, const unsigned int* in1,
                                         unsigned int stream_out0, unsigned int stream_in0,
                                         unsigned int stream_out1, unsigned int stream_in1,
                                         unsigned int iteration, unsigned int edge, int transpose,
                                         int check, unsigned long long* mismatches) {
    const unsigned int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= edge) {
        return;
    }
    const unsigned int row = blockIdx.y;
    const unsigned int a = row / edge;
    const unsigned int y = row - a * edge;
    const size_t logical = (size_t)row * edge + x;
    const size_t physical =
        transpose ? (size_t)a * edge * edge + (size_t)x * edge + y : logical;
    const bool second = blockIdx.z == 1;
    unsigned int* out = second ? out1 : out0;
    const unsigned int* in = second ? in1 : in0;
    const unsigned int so = second ? stream_out1 : stream_out0;
    const unsigned int si = second ? stream_in1 : stream_in0;

    out[physical] = pattern(iteration, so, (unsigned int)logical);
    if (check) {
        const unsigned int v = in[physical];
        if (v != pattern(iteration - 1u, si, (unsigned int)logical)) {
            atomicAdd(mismatches + blockIdx.z, 1ull);
        }
    }
}
