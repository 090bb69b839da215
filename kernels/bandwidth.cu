// Memory-bandwidth probe of thelma bench: a grid-stride copy of 16-byte vectors. Effective bandwidth
// counts the bytes read plus the bytes written, the same accounting as the D3Q19 roofline.
extern "C" __global__ void __launch_bounds__(256) bandwidth_copy(const float4 *__restrict__ src,
                                                               float4 *__restrict__ dst,
                                                               unsigned long long n) {
    for (unsigned long long k = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; k < n;
         k += (unsigned long long)gridDim.x * blockDim.x) {
        dst[k] = src[k];
    }
}
