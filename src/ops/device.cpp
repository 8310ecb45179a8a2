#include "ops/device.h"

#include <utility>

#include "core/check.h"
#if FP8RL_HAVE_CUDA
#include "ops/cuda/backend.h"
#include "ops/cuda/cuda_ops.h"
#endif

namespace fp8rl {

void raise_no_cuda() {
  RAISE("this build has no CUDA backend (built without nvcc)");
}

#if FP8RL_HAVE_CUDA

int CudaDevice::count() {
  return cuda::device_count();
}
bool CudaDevice::built() {
  return true;
}
std::string CudaDevice::describe(int ordinal) {
  CHECK(ordinal >= 0 && ordinal < count(), "no CUDA device {} ({} visible)", ordinal, count());
  return cuda::describe(ordinal);
}

CudaDevice::CudaDevice(const CudaDeviceOptions& options) {
  CHECK(count() > 0, "no CUDA device is visible");
  backend_ = std::make_unique<cuda::Backend>(options);
}
CudaDevice::~CudaDevice() = default;

Context CudaDevice::context() {
  Context ctx;
  ctx.device = Device::cuda;
  ctx.cuda = backend_.get();
  return ctx;
}

void CudaDevice::synchronize() {
  cuda::synchronize(*backend_);
}
std::string CudaDevice::name() const {
  return backend_->caps().name;
}
std::string CudaDevice::gemm_path(Fp8Scheme scheme) const {
  return cuda::gemm_path(*backend_, scheme);
}
GpuCapability CudaDevice::capability() const {
  return cuda::gpu_capability(backend_->caps());
}
std::string CudaDevice::last_linear_path() const {
  return backend_->last_linear_path;
}
std::pair<int64_t, int64_t> CudaDevice::last_decode_grid() const {
  return {backend_->last_decode_grid.items, backend_->last_decode_grid.blocks};
}
void CudaDevice::set_profiling(bool on) {
  backend_->set_profiling(on);
}
std::vector<OpTime> CudaDevice::profile() {
  return backend_->collect_profile();
}
void CudaDevice::reset_profile() {
  backend_->reset_profile();
}
double CudaDevice::time_gemm(const LinearWeight& w, int64_t m, int iters) {
  return cuda::time_gemm(*backend_, w, m, iters);
}
size_t CudaDevice::arena_high_water() const {
  return backend_->arena().high_water();
}
uint64_t CudaDevice::check_fp8_quotient(uint32_t b_first, uint32_t b_count, uint32_t b_step,
                                        uint32_t (&bad)[2]) {
  return cuda::check_fp8_quotient(*backend_, b_first, b_count, b_step, bad);
}

void CudaDevice::begin_capture() {
  Context ctx = context();
  begin_capture(ctx);
}

CudaGraph CudaDevice::end_capture() {
  Context ctx = context();
  return end_capture(ctx);
}

void CudaDevice::begin_capture(Context& ctx) {
  CHECK(ctx.device == Device::cuda && ctx.cuda != nullptr, "begin_capture: not a CUDA context");
  CUDA_CHECK(cudaStreamBeginCapture(ctx.cuda->stream(), cudaStreamCaptureModeThreadLocal));
}

CudaGraph CudaDevice::end_capture(Context& ctx) {
  CHECK(ctx.device == Device::cuda && ctx.cuda != nullptr, "end_capture: not a CUDA context");
  cuda::Backend* backend = ctx.cuda;
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(backend->stream(), &graph));
  CudaGraph g;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphGetNodes(graph, nullptr, &g.nodes_);
  const cudaError_t e2 = e == cudaSuccess ? cudaGraphInstantiate(&exec, graph, 0) : e;
  cudaGraphDestroy(graph);
  CUDA_CHECK(e2);
  g.exec_ = exec;
  g.stream_ = backend->stream();
  return g;
}

CudaGraph::CudaGraph(CudaGraph&& o) noexcept
    : exec_(std::exchange(o.exec_, nullptr)), stream_(o.stream_), nodes_(o.nodes_) {}
CudaGraph& CudaGraph::operator=(CudaGraph&& o) noexcept {
  std::swap(exec_, o.exec_);
  stream_ = o.stream_;
  nodes_ = o.nodes_;
  return *this;
}
CudaGraph::~CudaGraph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}
void CudaGraph::replay() {
  CHECK(exec_ != nullptr, "CudaGraph::replay: nothing was captured");
  CUDA_CHECK(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream_)));
}

size_t CudaDevice::memory_used() const {
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return total_b - free_b;
}
size_t CudaDevice::memory_total() const {
  return backend_->caps().memory;
}
size_t CudaDevice::peak_allocated() const {
  return backend_->peak_allocated();
}

#else  // a build without nvcc: the type exists, nothing can be opened

}  // namespace fp8rl
namespace fp8rl::cuda {
class Backend {};  // never constructed; complete so that unique_ptr<Backend> can be destroyed
}  // namespace fp8rl::cuda
namespace fp8rl {

int CudaDevice::count() {
  return 0;
}
bool CudaDevice::built() {
  return false;
}
std::string CudaDevice::describe(int) {
  raise_no_cuda();
}
CudaDevice::CudaDevice(const CudaDeviceOptions&) {
  raise_no_cuda();
}
CudaDevice::~CudaDevice() = default;
Context CudaDevice::context() {
  raise_no_cuda();
}
void CudaDevice::synchronize() {
  raise_no_cuda();
}
std::string CudaDevice::name() const {
  raise_no_cuda();
}
std::string CudaDevice::gemm_path(Fp8Scheme) const {
  raise_no_cuda();
}
GpuCapability CudaDevice::capability() const {
  raise_no_cuda();
}
std::string CudaDevice::last_linear_path() const {
  raise_no_cuda();
}
std::pair<int64_t, int64_t> CudaDevice::last_decode_grid() const {
  raise_no_cuda();
}
void CudaDevice::set_profiling(bool) {
  raise_no_cuda();
}
std::vector<OpTime> CudaDevice::profile() {
  raise_no_cuda();
}
void CudaDevice::reset_profile() {
  raise_no_cuda();
}
double CudaDevice::time_gemm(const LinearWeight&, int64_t, int) {
  raise_no_cuda();
}
size_t CudaDevice::arena_high_water() const {
  raise_no_cuda();
}
uint64_t CudaDevice::check_fp8_quotient(uint32_t, uint32_t, uint32_t, uint32_t (&)[2]) {
  raise_no_cuda();
}
void CudaDevice::begin_capture() {
  raise_no_cuda();
}
CudaGraph CudaDevice::end_capture() {
  raise_no_cuda();
}
void CudaDevice::begin_capture(Context&) {
  raise_no_cuda();
}
CudaGraph CudaDevice::end_capture(Context&) {
  raise_no_cuda();
}
CudaGraph::CudaGraph(CudaGraph&&) noexcept {}
CudaGraph& CudaGraph::operator=(CudaGraph&&) noexcept {
  return *this;
}
CudaGraph::~CudaGraph() = default;
void CudaGraph::replay() {
  raise_no_cuda();
}
size_t CudaDevice::memory_used() const {
  raise_no_cuda();
}
size_t CudaDevice::memory_total() const {
  raise_no_cuda();
}
size_t CudaDevice::peak_allocated() const {
  raise_no_cuda();
}

#endif

}  // namespace fp8rl
