// Torch binding for the demo kernels. The kernels are declared here with plain C types so the
// .cu file needs no torch headers.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

int cuforge_demo_saxpy(float a, const float* x, float* y, int64_t n, cudaStream_t stream);
int cuforge_demo_sumsq(const float* x, float* out, int64_t n, cudaStream_t stream);

namespace {

void check_input(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, name, " must be float32");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

// y <- a * x + y, in place; returns y.
torch::Tensor saxpy_(double a, const torch::Tensor& x, torch::Tensor y) {
  check_input(x, "x");
  check_input(y, "y");
  TORCH_CHECK(x.numel() == y.numel(), "x and y must have the same number of elements");
  auto stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  int err = cuforge_demo_saxpy(static_cast<float>(a), x.data_ptr<float>(), y.data_ptr<float>(),
                               x.numel(), stream);
  TORCH_CHECK(err == 0, "saxpy kernel launch failed: ", cudaGetErrorString(cudaError_t(err)));
  return y;
}

// sum(x * x) as a 1-element tensor.
torch::Tensor sumsq(const torch::Tensor& x) {
  check_input(x, "x");
  auto out = torch::zeros({1}, x.options());
  auto stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  int err = cuforge_demo_sumsq(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), stream);
  TORCH_CHECK(err == 0, "sumsq kernel launch failed: ", cudaGetErrorString(cudaError_t(err)));
  return out;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "cuforge demo kernels";
  m.def("saxpy_", &saxpy_, "y <- a * x + y (in place)");
  m.def("sumsq", &sumsq, "sum of squares");
}
