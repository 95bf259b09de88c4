// collectived._native: the client library for Python (nanobind). Thin on
// purpose: arrays arrive as raw pointers (collectived/_arrays.py reads them
// from torch, DLPack, the buffer protocol or __cuda_array_interface__; the
// per-op hot cases, NumPy on the host and torch on the GPU, are read here in
// one call, and fall back to Python for anything unusual), every
// Status that is not OK raises the collectived._errors class of its code, and
// every call that may block (connect, join, post, wait) releases the GIL, so
// that ranks may be threads of one process.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "collectived/client.h"

namespace nb = nanobind;
namespace cd = collectived;

namespace {

struct StatusError {
  cd::Status status;
};

void Check(const cd::Status& s) {
  if (!s.ok()) throw StatusError{s};
}

void Translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const StatusError& e) {
    nb::object exc = nb::module_::import_("collectived._errors")
                         .attr("from_status")(static_cast<int>(e.status.code()), e.status.message());
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  }
}

[[noreturn]] void Invalid(const std::string& m) { throw StatusError{cd::Status::InvalidArgument(m)}; }

cd::DataType ToDataType(int v) {
  const auto d = static_cast<cd::DataType>(v);
  if (cd::DataTypeSize(d) == 0) Invalid("dtype: unknown data type " + std::to_string(v));
  return d;
}

cd::ReduceOp ToReduceOp(int v) {
  if (v < 1 || v > 5) Invalid("op: unknown reduction " + std::to_string(v));
  return static_cast<cd::ReduceOp>(v);
}

// DLPack's view of a collectived type.
nb::dlpack::dtype DlType(cd::DataType d) {
  using nb::dlpack::dtype_code;
  switch (d) {
    case cd::DataType::kFloat32: return {uint8_t(dtype_code::Float), 32, 1};
    case cd::DataType::kFloat64: return {uint8_t(dtype_code::Float), 64, 1};
    case cd::DataType::kFloat16: return {uint8_t(dtype_code::Float), 16, 1};
    case cd::DataType::kBFloat16: return {uint8_t(dtype_code::Bfloat), 16, 1};
    case cd::DataType::kInt32: return {uint8_t(dtype_code::Int), 32, 1};
    case cd::DataType::kInt64: return {uint8_t(dtype_code::Int), 64, 1};
    case cd::DataType::kUint32: return {uint8_t(dtype_code::UInt), 32, 1};
    default: Invalid("dtype: unknown data type");
  }
}

// DataType of a DLPack type, kUnspecified when collectived has none.
cd::DataType FromDl(const nb::dlpack::dtype& t) {
  using nb::dlpack::dtype_code;
  if (t.lanes != 1) return cd::DataType::kUnspecified;
  switch (t.code) {
    case uint8_t(dtype_code::Float):
      return t.bits == 32 ? cd::DataType::kFloat32 : t.bits == 64 ? cd::DataType::kFloat64
                          : t.bits == 16 ? cd::DataType::kFloat16 : cd::DataType::kUnspecified;
    case uint8_t(dtype_code::Bfloat): return t.bits == 16 ? cd::DataType::kBFloat16 : cd::DataType::kUnspecified;
    case uint8_t(dtype_code::Int):
      return t.bits == 32 ? cd::DataType::kInt32 : t.bits == 64 ? cd::DataType::kInt64 : cd::DataType::kUnspecified;
    case uint8_t(dtype_code::UInt): return t.bits == 32 ? cd::DataType::kUint32 : cd::DataType::kUnspecified;
    default: return cd::DataType::kUnspecified;
  }
}

std::string DlName(const nb::dlpack::dtype& t) {
  static const char* kinds[] = {"int", "uint", "float", "code 3 of ", "bfloat", "complex", "bool"};
  std::string n = t.code < 7 ? kinds[t.code] : "DLPack code " + std::to_string(t.code) + " of ";
  n += std::to_string(t.bits);
  if (t.lanes != 1) n += " x" + std::to_string(t.lanes);
  return n;
}

// An op's array: where its elements are, how many, their type, and the
// device (-1: host memory); `array` keeps the view valid while it is used.
struct ArrayView {
  uintptr_t ptr;
  uint64_t count;
  cd::DataType dtype;
  int device;
  nb::ndarray<nb::ro> array;
};

// The hot path of an op's argument (collectived/_arrays.py): (pointer,
// elements, DataType, device (-1: host memory), shape) of a DLPack or
// buffer-protocol array, with every refusal raised as INVALID_ARGUMENT
// naming `what`. `as_dtype` (0: none) reads the elements as that type when
// the sizes match.
// The collectived type of a buffer-protocol format (native or little
// endian, exact size); kUnspecified for any other.
cd::DataType FromFormat(const char* f, Py_ssize_t itemsize) {
  if (f == nullptr) return cd::DataType::kUnspecified;
  if (*f == '<' || *f == '=' || *f == '@') ++f;
  if (f[0] == 0 || f[1] != 0) return cd::DataType::kUnspecified;
  cd::DataType d = cd::DataType::kUnspecified;
  switch (f[0]) {
    case 'f': d = cd::DataType::kFloat32; break;
    case 'd': d = cd::DataType::kFloat64; break;
    case 'e': d = cd::DataType::kFloat16; break;
    case 'i': case 'l': case 'q': d = itemsize == 4 ? cd::DataType::kInt32 : cd::DataType::kInt64; break;
    case 'I': case 'L': d = itemsize == 4 ? cd::DataType::kUint32 : cd::DataType::kUnspecified; break;
    default: break;
  }
  return cd::DataTypeSize(d) == static_cast<size_t>(itemsize) ? d : cd::DataType::kUnspecified;
}

// `fast`: a host array with the buffer protocol (NumPy's) is read through
// PyObject_GetBuffer, about a fifth of the DLPack import's cost; whatever it
// does not take as it is (another type, read-only where written, strided)
// goes the DLPack way, whose refusals name the problem. `array` stays empty
// then.
ArrayView View(nb::handle obj, const std::string& w, bool writable, int as_dtype, bool fast = false) {
  if (fast && as_dtype == 0 && PyObject_CheckBuffer(obj.ptr())) {
    Py_buffer b;
    if (PyObject_GetBuffer(obj.ptr(), &b, PyBUF_RECORDS_RO) == 0) {
      const cd::DataType d = FromFormat(b.format, b.itemsize);
      const bool taken = d != cd::DataType::kUnspecified && !(writable && b.readonly) && PyBuffer_IsContiguous(&b, 'C');
      ArrayView v{reinterpret_cast<uintptr_t>(b.buf), taken ? static_cast<uint64_t>(b.len / b.itemsize) : 0, d, -1, {}};
      PyBuffer_Release(&b);
      if (taken) return v;
    } else {
      PyErr_Clear();
    }
  }
  nb::ndarray<nb::ro> a;
  try {
    a = nb::cast<nb::ndarray<nb::ro>>(obj, /*convert=*/false);
  } catch (const nb::cast_error&) {
    Invalid(w + ": not an array: " + std::string(nb::type_name(obj.type()).c_str()) +
            " has neither __dlpack__, the buffer protocol nor __cuda_array_interface__");
  }
  const auto dt = a.dtype();
  cd::DataType d = FromDl(dt);
  if (as_dtype != 0 && dt.lanes == 1 && dt.bits == 8 * cd::DataTypeSize(ToDataType(as_dtype))) {
    d = static_cast<cd::DataType>(as_dtype);
  }
  if (d == cd::DataType::kUnspecified) {
    Invalid(w + ": element type " + DlName(dt) +
            " is not supported (one of float32, float64, float16, bfloat16, int32, int64, uint32)");
  }
  if (writable) {
    try {
      (void)nb::cast<nb::ndarray<>>(obj, false);
    } catch (const nb::cast_error&) {
      Invalid(w + ": the array is read-only");
    }
  }
  uint64_t count = 1;
  int64_t expect = 1;
  bool contiguous = true;
  for (size_t k = a.ndim(); k-- > 0;) {
    if (a.shape(k) != 1 && a.stride(k) != expect) contiguous = false;
    expect *= static_cast<int64_t>(a.shape(k));
    count *= a.shape(k);
  }
  if (!contiguous) {
    std::string st;
    for (size_t i = 0; i < a.ndim(); ++i) st += (i ? ", " : "") + std::to_string(a.stride(i));
    Invalid(w + ": the array is not contiguous (strides (" + st + ") in elements); pass a contiguous copy");
  }
  int device = -1;
  const int t = a.device_type();
  if (t == nb::device::cuda::value || t == nb::device::cuda_managed::value) {
    device = a.device_id();
  } else if (t != nb::device::cpu::value && t != nb::device::cuda_host::value) {
    Invalid(w + ": DLPack device type " + std::to_string(t) + " is neither host memory nor CUDA");
  }
  return ArrayView{reinterpret_cast<uintptr_t>(a.data()), count, d, device, std::move(a)};
}

nb::tuple Inspect(nb::handle obj, const char* what, bool writable, int as_dtype) {
  const ArrayView v = View(obj, what, writable, as_dtype);
  nb::list shape;
  for (size_t i = 0; i < v.array.ndim(); ++i) shape.append(v.array.shape(i));
  return nb::make_tuple(v.ptr, v.count, static_cast<int>(v.dtype), v.device, nb::tuple(shape));
}

// torch, as collectived/_arrays.py registers it once it has read a tensor:
// the tensor type, its dtypes' DataTypes and the raw current-stream getter.
// Leaked on purpose: it must outlive the interpreter's teardown.
struct TorchHooks {
  PyObject* tensor_type = nullptr;
  nb::dict dtypes;
  nb::object raw_stream;
};
TorchHooks& Torch() {
  static auto* hooks = new TorchHooks;
  return *hooks;
}
void RegisterTorch(nb::handle tensor_type, nb::dict dtypes, nb::object raw_stream) {
  TorchHooks& t = Torch();
  t.tensor_type = tensor_type.inc_ref().ptr();
  t.dtypes = std::move(dtypes);
  t.raw_stream = std::move(raw_stream);
}

// What an op needs of a torch CUDA tensor on `device`: the reads
// _arrays._describe_torch makes, without the Python frames between them.
// False for anything it does not take as it is (not exactly a torch.Tensor,
// another device, a type collectived lacks, strided, any error): the caller
// then goes the Python way, whose refusals name the problem.
struct TorchArg {
  uintptr_t ptr;
  uint64_t count;
  int dtype;
  uintptr_t stream;
};
bool ReadTorch(nb::handle t, int device, TorchArg* a) {
  const TorchHooks& h = Torch();
  if (h.tensor_type == nullptr || reinterpret_cast<PyObject*>(Py_TYPE(t.ptr())) != h.tensor_type) return false;
  static PyObject* const kDtype = PyUnicode_InternFromString("dtype");
  static PyObject* const kIsCuda = PyUnicode_InternFromString("is_cuda");
  static PyObject* const kGetDevice = PyUnicode_InternFromString("get_device");
  static PyObject* const kIsContiguous = PyUnicode_InternFromString("is_contiguous");
  static PyObject* const kDataPtr = PyUnicode_InternFromString("data_ptr");
  static PyObject* const kNumel = PyUnicode_InternFromString("numel");
  const auto call = [&](PyObject* name) { return nb::steal(PyObject_CallMethodNoArgs(t.ptr(), name)); };
  bool ok = false;
  do {
    nb::object dt = nb::steal(PyObject_GetAttr(t.ptr(), kDtype));
    PyObject* code = dt.is_valid() ? PyDict_GetItemWithError(h.dtypes.ptr(), dt.ptr()) : nullptr;
    if (code == nullptr) break;
    nb::object cuda = nb::steal(PyObject_GetAttr(t.ptr(), kIsCuda));
    if (!cuda.is(nb::handle(Py_True))) break;
    nb::object dev = call(kGetDevice), contiguous = call(kIsContiguous);
    if (!dev.is_valid() || PyLong_AsLong(dev.ptr()) != device || !contiguous.is(nb::handle(Py_True))) break;
    nb::object ptr = call(kDataPtr), numel = call(kNumel);
    if (!ptr.is_valid() || !numel.is_valid()) break;
    nb::object stream = nb::steal(PyObject_CallOneArg(h.raw_stream.ptr(), dev.ptr()));
    if (!stream.is_valid()) break;
    *a = TorchArg{reinterpret_cast<uintptr_t>(PyLong_AsVoidPtr(ptr.ptr())), PyLong_AsUnsignedLongLong(numel.ptr()),
                  static_cast<int>(PyLong_AsLong(code)), reinterpret_cast<uintptr_t>(PyLong_AsVoidPtr(stream.ptr()))};
    ok = PyErr_Occurred() == nullptr;
  } while (false);
  PyErr_Clear();
  return ok;
}

// A daemon buffer shared by the arrays over it and the registry of spans.
using SharedBuffer = std::shared_ptr<cd::Buffer>;

// One op's completion, and for a staged host op the copy-out that follows it.
class PyHandle {
 public:
  // `stream`: the GPU op's stream, where wait() orders others by default.
  PyHandle(cd::Handle h, bool gpu, uintptr_t stream = 0) : h_(std::move(h)), gpu_(gpu), stream_(stream) {}
  void SetFinish(std::function<void()> f) { finish_ = std::move(f); }

  // Blocks (GIL released) until the op completed, then finishes it once.
  void Wait(int timeout_ms) {
    cd::Status st;
    {
      nb::gil_scoped_release unlocked;
      std::lock_guard<std::mutex> lock(mu_);
      if (!done_) {
        st = h_.Wait(timeout_ms);
        // OK means complete (Handle::Wait's contract); only a failure may be
        // this wait's timeout rather than the op's verdict, so only then test
        // again (one event query less per op on the GPU).
        cd::Status now = st;
        if (!st.ok() && !h_.Test(&now)) {
          throw StatusError{cd::Status::DeadlineExceeded("wait: the op is not complete after " +
                                                         std::to_string(timeout_ms) + " ms (still running)")};
        }
        FinishLocked(now);
      }
    }
    Check(status_);
  }
  // GPU ops: `stream` waits for the op, the host does not.
  void WaitOn(uintptr_t stream) {
    cd::Status st;
    {
      nb::gil_scoped_release unlocked;
      st = h_.WaitOn(reinterpret_cast<cd::GpuStream>(stream));
    }
    Check(st);
  }
  bool Done() {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return true;
    cd::Status now;
    if (!h_.Test(&now)) return false;
    FinishLocked(now);
    return true;
  }
  // (code, message) once complete; None while it runs.
  nb::object Status() {
    if (!Done()) return nb::none();
    return nb::make_tuple(static_cast<int>(status_.code()), status_.message());
  }
  bool gpu() const { return gpu_; }
  uintptr_t stream() const { return stream_; }
  uint64_t op_index() const { return h_.op_index(); }

 private:
  void FinishLocked(const cd::Status& st) {
    status_ = st;
    if (st.ok() && finish_) finish_();
    finish_ = nullptr;  // returns the scratch buffer either way
    done_ = true;
  }
  cd::Handle h_;
  bool gpu_;
  uintptr_t stream_;
  std::mutex mu_;
  bool done_ = false;
  cd::Status status_;
  std::function<void()> finish_;
};

class PyComm {
 public:
  PyComm(std::shared_ptr<cd::Client> client, std::unique_ptr<cd::Communicator> comm, int device)
      : client_(std::move(client)), comm_(std::move(comm)), device_(device) {}

  // An array of `bytes` in the daemon's shared memory (host) or this rank's
  // symmetric heap (GPU); ops on it run zero-copy. `numpy`: a NumPy array
  // (host types NumPy has), else a DLPack-capable nanobind array.
  nb::object Alloc(std::vector<size_t> shape, int dtype, bool numpy) {
    const cd::DataType d = ToDataType(dtype);
    uint64_t count = 1;
    for (size_t n : shape) count *= n;
    const uint64_t bytes = std::max<uint64_t>(1, count) * cd::DataTypeSize(d);
    auto buf = std::make_shared<cd::Buffer>();
    {
      nb::gil_scoped_release unlocked;
      Check(on_gpu() ? comm_->AllocBuffer(bytes, buf.get()) : client_->AllocBuffer(bytes, buf.get()));
    }
    if (!on_gpu()) {
      std::lock_guard<std::mutex> lock(mu_);
      spans_[reinterpret_cast<uintptr_t>(buf->data())] = {bytes, buf};
    }
    // The array owns the buffer: freed when the last array over it goes.
    auto* keep = new SharedBuffer(buf);
    nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<SharedBuffer*>(p); });
    const int dev_type = on_gpu() ? nb::device::cuda::value : nb::device::cpu::value;
    const int dev_id = on_gpu() ? device_ : 0;
    if (numpy && !on_gpu()) {
      return nb::ndarray<nb::numpy>(buf->data(), shape.size(), shape.data(), owner, nullptr, DlType(d), dev_type, dev_id)
          .cast();
    }
    return nb::ndarray<>(buf->data(), shape.size(), shape.data(), owner, nullptr, DlType(d), dev_type, dev_id).cast();
  }

  PyHandle* AllReduce(uintptr_t send, uintptr_t recv, uint64_t count, int dtype, int op, uintptr_t stream) {
    const cd::DataType d = ToDataType(dtype);
    const cd::ReduceOp o = ToReduceOp(op);
    cd::Handle h;
    if (on_gpu()) {
      {
        nb::gil_scoped_release unlocked;
        Check(comm_->AllReduce(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv), count, d, o,
                               reinterpret_cast<cd::GpuStream>(stream), &h));
      }
      return new PyHandle(std::move(h), true, stream);
    }
    const uint64_t bytes = count * cd::DataTypeSize(d);
    return HostOp(send, recv, bytes, bytes, 0, [&](cd::BufferSpan s, cd::BufferSpan r, cd::Handle* out) {
      return comm_->AllReduce(s, r, count, d, o, out);
    });
  }

  // A host communicator's all-reduce of arrays (NumPy, the buffer protocol,
  // DLPack on the host) in one call: what collectived.Communicator.all_reduce
  // checks in Python for every other array, with the same messages. `out`
  // None: in place (x is written, so it must be writable).
  PyHandle* AllReduceArrays(nb::handle x, nb::handle out, int op) {
    const bool in_place = out.is_none() || out.is(x);
    const ArrayView a = View(x, "x", in_place, 0, /*fast=*/true);
    HostOnly(a, "x");
    if (in_place) return AllReduce(a.ptr, a.ptr, a.count, static_cast<int>(a.dtype), op, 0);
    const ArrayView o = View(out, "out", true, 0, /*fast=*/true);
    HostOnly(o, "out");
    if (o.count != a.count) {
      Invalid("out: " + std::to_string(o.count) + " elements where x has " + std::to_string(a.count));
    }
    if (o.dtype != a.dtype) {
      Invalid(std::string("out: type ") + cd::DataTypeName(o.dtype) + " where x is " + cd::DataTypeName(a.dtype));
    }
    return AllReduce(a.ptr, o.ptr, a.count, static_cast<int>(a.dtype), op, 0);
  }

  // A GPU communicator's all-reduce of torch CUDA tensors on its stream in
  // one call (collectived.Communicator.all_reduce's common GPU case); None
  // when x or out is anything ReadTorch does not take, for the Python way.
  nb::object AllReduceTorch(nb::handle x, nb::handle out, int op) {
    TorchArg a, o;
    if (!on_gpu() || !ReadTorch(x, device_, &a)) return nb::none();
    o = a;
    if (!out.is_none() && !out.is(x) && (!ReadTorch(out, device_, &o) || o.count != a.count || o.dtype != a.dtype)) {
      return nb::none();
    }
    return nb::cast(AllReduce(a.ptr, o.ptr, a.count, a.dtype, op, a.stream), nb::rv_policy::take_ownership);
  }

  PyHandle* AllGather(uintptr_t send, uintptr_t recv, uint64_t count, int dtype, uintptr_t stream) {
    const cd::DataType d = ToDataType(dtype);
    cd::Handle h;
    if (on_gpu()) {
      {
        nb::gil_scoped_release unlocked;
        Check(comm_->AllGather(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv), count, d,
                               reinterpret_cast<cd::GpuStream>(stream), &h));
      }
      return new PyHandle(std::move(h), true, stream);
    }
    const uint64_t bytes = count * cd::DataTypeSize(d);
    return HostOp(send, recv, bytes, bytes * comm_->world_size(), bytes * comm_->rank(),
                  [&](cd::BufferSpan s, cd::BufferSpan r, cd::Handle* out) { return comm_->AllGather(s, r, count, d, out); });
  }

  bool on_gpu() const { return comm_->on_gpu(); }
  void HostOnly(const ArrayView& v, const char* what) const {
    if (on_gpu()) Invalid(std::string(what) + ": arrays of a GPU communicator go through its stream");
    if (v.device >= 0) {
      Invalid(std::string(what) + ": GPU memory (device " + std::to_string(v.device) + ") given to a host communicator");
    }
  }
  bool ZeroCopy(uintptr_t p, uint64_t bytes) {
    if (on_gpu()) return comm_->ZeroCopy(reinterpret_cast<const void*>(p), bytes);
    uint64_t off = 0;
    return Locate(p, bytes, &off) != nullptr;
  }
  nb::object AsyncError() const {
    const cd::Status st = comm_->AsyncError();
    if (st.ok()) return nb::none();
    return nb::make_tuple(static_cast<int>(st.code()), st.message());
  }
  void Abort(const std::string& reason) {
    nb::gil_scoped_release unlocked;
    Check(comm_->Abort(reason));
  }
  void Destroy() {
    cd::Status st;
    {
      nb::gil_scoped_release unlocked;
      st = comm_->Destroy();
      std::lock_guard<std::mutex> lock(mu_);
      scratch_.clear();
    }
    Check(st);
  }
  cd::Communicator& comm() { return *comm_; }
  int device() const { return device_; }

 private:
  // The buffer holding [p, p + bytes), with the offset of p; null if none.
  SharedBuffer Locate(uintptr_t p, uint64_t bytes, uint64_t* off) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = spans_.upper_bound(p);
    if (it == spans_.begin()) return nullptr;
    --it;
    SharedBuffer b = it->second.second.lock();
    if (b == nullptr) {
      spans_.erase(it);
      return nullptr;
    }
    if (p + bytes > it->first + it->second.first) return nullptr;
    *off = p - it->first;
    return b;
  }

  // Host ops: zero-copy when both arrays live in daemon buffers of this
  // communicator's client; otherwise through a scratch buffer (the input
  // copied in at `in_at`, the op in place there, the output copied out when
  // the op completes).
  template <typename Post>
  PyHandle* HostOp(uintptr_t send, uintptr_t recv, uint64_t in_bytes, uint64_t out_bytes, uint64_t in_at, Post post) {
    uint64_t so = 0, ro = 0;
    SharedBuffer sb = Locate(send, in_bytes, &so);
    SharedBuffer rb = Locate(recv, out_bytes, &ro);
    cd::Handle h;
    if (sb != nullptr && rb != nullptr) {
      {
        nb::gil_scoped_release unlocked;
        Check(post(cd::BufferSpan(*sb, so), cd::BufferSpan(*rb, ro), &h));
      }
      auto* ph = new PyHandle(std::move(h), false);
      ph->SetFinish([sb, rb] {});  // keeps both buffers until the op completed
      return ph;
    }
    std::unique_ptr<cd::Buffer> scratch;
    {
      nb::gil_scoped_release unlocked;
      scratch = TakeScratch(out_bytes);
      std::memcpy(static_cast<uint8_t*>(scratch->data()) + in_at, reinterpret_cast<const void*>(send), in_bytes);
      cd::Status st = post(cd::BufferSpan(*scratch, in_at), cd::BufferSpan(*scratch, 0), &h);
      if (!st.ok()) {
        GiveScratch(std::move(scratch));
        Check(st);
      }
    }
    auto* ph = new PyHandle(std::move(h), false);
    auto shared = std::make_shared<std::unique_ptr<cd::Buffer>>(std::move(scratch));
    ph->SetFinish([this, shared, recv, out_bytes] {
      std::memcpy(reinterpret_cast<void*>(recv), (*shared)->data(), out_bytes);
      GiveScratch(std::move(*shared));
    });
    return ph;
  }

  std::unique_ptr<cd::Buffer> TakeScratch(uint64_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = scratch_.begin(); it != scratch_.end(); ++it) {
        if ((*it)->size() >= bytes) {
          auto b = std::move(*it);
          scratch_.erase(it);
          return b;
        }
      }
    }
    uint64_t size = 4096;
    while (size < bytes) size *= 2;
    auto b = std::make_unique<cd::Buffer>();
    Check(client_->AllocBuffer(size, b.get()));
    return b;
  }
  void GiveScratch(std::unique_ptr<cd::Buffer> b) {
    if (b == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (scratch_.size() < 16) scratch_.push_back(std::move(b));
  }

  std::shared_ptr<cd::Client> client_;
  std::unique_ptr<cd::Communicator> comm_;
  int device_;
  std::mutex mu_;
  std::map<uintptr_t, std::pair<uint64_t, std::weak_ptr<cd::Buffer>>> spans_;  // host buffers by address
  std::vector<std::unique_ptr<cd::Buffer>> scratch_;
};

class PyClient {
 public:
  PyClient(const std::string& socket, const std::string& name, int rpc_timeout_ms) {
    std::unique_ptr<cd::Client> c;
    {
      nb::gil_scoped_release unlocked;
      Check(cd::Client::Connect({.socket_path = socket, .client_name = name, .rpc_timeout_ms = rpc_timeout_ms}, &c));
    }
    client_ = std::move(c);
  }
  nb::dict Version() {
    cd::VersionInfo v;
    {
      nb::gil_scoped_release unlocked;
      Check(client_->GetVersion(&v));
    }
    nb::dict d;
    d["daemon_version"] = v.daemon_version;
    d["api_major"] = v.api_major;
    d["api_minor"] = v.api_minor;
    d["backends"] = v.backends;
    d["active_backend"] = v.active_backend;
    d["capabilities"] = v.capabilities;
    d["max_message_bytes"] = v.max_message_bytes;
    return d;
  }
  PyComm* Communicator(const std::string& key, uint32_t world, uint32_t rank, int device, uint64_t heap_bytes,
                       int mode, uint32_t op_timeout_ms, int join_timeout_ms) {
    if (mode < 0 || mode > 2) Invalid("mode: unknown execution mode " + std::to_string(mode));
    cd::CommunicatorOptions o;
    o.key = key;
    o.world_size = world;
    o.rank = rank;
    o.device = device;
    o.gpu_heap_bytes = heap_bytes;
    o.mode = static_cast<cd::ExecutionMode>(mode);
    o.op_timeout_ms = op_timeout_ms;
    o.join_timeout_ms = join_timeout_ms;
    std::unique_ptr<cd::Communicator> comm;
    {
      nb::gil_scoped_release unlocked;
      Check(client_->CreateCommunicator(o, &comm));
    }
    return new PyComm(client_, std::move(comm), device);
  }
  uint64_t session_id() const { return client_->session_id(); }

 private:
  std::shared_ptr<cd::Client> client_;
};

}  // namespace

NB_MODULE(_native, m) {
  m.doc() = "collectived's client library (internal: use the collectived package)";
  nb::register_exception_translator(Translate);
  m.attr("API_MAJOR") = cd::kApiMajor;
  m.attr("API_MINOR") = cd::kApiMinor;

  nb::class_<PyHandle>(m, "Handle")
      .def("wait", &PyHandle::Wait, nb::arg("timeout_ms") = -1)
      .def("wait_on", &PyHandle::WaitOn, nb::arg("stream"))
      .def("done", &PyHandle::Done)
      .def("status", &PyHandle::Status)
      .def_prop_ro("gpu", &PyHandle::gpu)
      .def_prop_ro("stream", &PyHandle::stream)
      .def_prop_ro("op_index", &PyHandle::op_index);

  nb::class_<PyComm>(m, "Communicator")
      .def("alloc", &PyComm::Alloc, nb::arg("shape"), nb::arg("dtype"), nb::arg("numpy"))
      .def("all_reduce", &PyComm::AllReduce, nb::rv_policy::take_ownership)
      .def("all_reduce_arrays", &PyComm::AllReduceArrays, nb::arg("x"), nb::arg("out").none(), nb::arg("op"),
           nb::rv_policy::take_ownership)
      .def("all_reduce_torch", &PyComm::AllReduceTorch, nb::arg("x"), nb::arg("out").none(), nb::arg("op"))
      .def("all_gather", &PyComm::AllGather, nb::rv_policy::take_ownership)
      .def("zero_copy", &PyComm::ZeroCopy)
      .def("async_error", &PyComm::AsyncError)
      .def("abort", &PyComm::Abort)
      .def("destroy", &PyComm::Destroy)
      .def_prop_ro("on_gpu", &PyComm::on_gpu)
      .def_prop_ro("device", &PyComm::device)
      .def_prop_ro("rank", [](PyComm& c) { return c.comm().rank(); })
      .def_prop_ro("world_size", [](PyComm& c) { return c.comm().world_size(); })
      .def_prop_ro("id", [](PyComm& c) { return c.comm().id(); })
      .def_prop_ro("mode", [](PyComm& c) { return static_cast<int>(c.comm().mode()); })
      .def_prop_ro("max_message_bytes", [](PyComm& c) { return c.comm().max_message_bytes(); });

  nb::class_<PyClient>(m, "Client")
      .def(nb::init<const std::string&, const std::string&, int>())
      .def("version", &PyClient::Version)
      .def("communicator", &PyClient::Communicator, nb::rv_policy::take_ownership)
      .def_prop_ro("session_id", &PyClient::session_id);

  m.def("register_torch", &RegisterTorch, nb::arg("tensor_type"), nb::arg("dtypes"), nb::arg("raw_stream"));
  m.def("inspect", &Inspect, nb::arg("obj"), nb::arg("what"), nb::arg("writable"), nb::arg("as_dtype"));
}
