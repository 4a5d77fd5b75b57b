// Demo kernels: CUDA headers only, so this file compiles in seconds for several arches.
#include <cuda_runtime.h>
#include <cstdint>

namespace {

__global__ void saxpy_kernel(float a, const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// Sum of squares per block, then one atomicAdd per block.
__global__ void sumsq_kernel(const float* x, float* out, int64_t n) {
  __shared__ float partial[256];
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  partial[threadIdx.x] = i < n ? x[i] * x[i] : 0.f;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, partial[0]);
}

}  // namespace

int cuforge_demo_saxpy(float a, const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return 0;
  int blocks = static_cast<int>((n + 255) / 256);
  saxpy_kernel<<<blocks, 256, 0, stream>>>(a, x, y, n);
  return static_cast<int>(cudaGetLastError());
}

int cuforge_demo_sumsq(const float* x, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return 0;
  int blocks = static_cast<int>((n + 255) / 256);
  sumsq_kernel<<<blocks, 256, 0, stream>>>(x, out, n);
  return static_cast<int>(cudaGetLastError());
}
