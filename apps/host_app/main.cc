/*!
 * \file main.cc
 * \brief npu_host: run a tvm_npu artifact on an input file, without Python.
 *
 *   npu_host model.so input.npy [--top 5] [--out y.bin] [--profile] [--threads 8 --runs 50]
 *            [--timeout-ms 5] [--no-verify]
 *
 * The input is a .npy file (float32 or int8, C order) or raw little-endian float32 with --shape
 * 1,3,224,224. Prints the top-k of the first output, writes it raw with --out, prints the per-region
 * cycle profile with --profile. With --threads N --runs M, N threads (one Model each) run M inferences
 * each and the app checks every result equals the first one bit for bit. With --timeout-ms T it also
 * starts one asynchronous run, waits at most T ms (ERR_TIMEOUT when late), then shows the model is still
 * usable: the run completes and a new one gives the same result. The library must carry the integrity
 * trailer of tvm_npu.export_library (checked before dlopen, include/tvm_npu/artifact.h); --no-verify
 * loads one exported without it (plain ex.export_library) with the ELF check only.
 *
 *   npu_host lm.so --prompt-ids 1,2,3 --max-new-tokens 16 [--logits-out l.bin] [--no-verify]
 *
 * runs an LLM exported by lm.export_library (llm_loop.cc): prefill, then a greedy decode loop.
 */
#include <tvm_npu/host.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>
#include <thread>

namespace host = tvm_npu::host;
namespace ffi = tvm::ffi;

namespace {

struct Input {
  std::vector<int64_t> shape;
  DLDataType dtype = host::kFloat32;
  std::string bytes;
};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw host::Error("ERR_SHAPE_MISMATCH", "cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<int64_t> ParseShape(const std::string& text) {
  std::vector<int64_t> shape;
  std::stringstream ss(text);
  for (std::string dim; std::getline(ss, dim, ',');) {
    if (dim.find_first_not_of(" 0123456789") != std::string::npos ||
        dim.find_first_of("0123456789") == std::string::npos) {
      throw host::Error("ERR_SHAPE_MISMATCH", "bad shape '" + text + "': use e.g. 1,3,224,224");
    }
    shape.push_back(std::stoll(dim));
  }
  return shape;
}

// A .npy file (version 1-3, C order, float32 '<f4' or int8 '|i1').
Input ReadNpy(const std::string& data, const std::string& path) {
  if (data.size() < 10 || data.compare(0, 6, "\x93NUMPY") != 0) {
    throw host::Error("ERR_SHAPE_MISMATCH", path + " is not a .npy file");
  }
  const bool v1 = data[6] == 1;
  const size_t len_bytes = v1 ? 2 : 4, start = 8 + len_bytes;
  size_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) header_len |= size_t(uint8_t(data[8 + i])) << (8 * i);
  if (start + header_len > data.size())
    throw host::Error("ERR_SHAPE_MISMATCH", path + ": truncated header");
  const std::string header = data.substr(start, header_len);
  Input in;
  if (header.find("'<f4'") != std::string::npos) {
    in.dtype = host::kFloat32;
  } else if (header.find("'|i1'") != std::string::npos) {
    in.dtype = host::kInt8;
  } else {
    throw host::Error("ERR_SHAPE_MISMATCH", path + ": only float32 and int8 arrays are read");
  }
  if (header.find("'fortran_order': True") != std::string::npos) {
    throw host::Error("ERR_SHAPE_MISMATCH",
                      path + ": save the array in C order (np.ascontiguousarray)");
  }
  const size_t open = header.find('(', header.find("'shape'")), close = header.find(')', open);
  std::string dims = header.substr(open + 1, close - open - 1);
  dims.erase(std::remove(dims.begin(), dims.end(), ' '), dims.end());
  if (!dims.empty() && dims.back() == ',') dims.pop_back();
  in.shape = dims.empty() ? std::vector<int64_t>{} : ParseShape(dims);
  in.bytes = data.substr(start + header_len);
  return in;
}

Input Load(const std::string& path, const std::string& shape) {
  std::string data = ReadFile(path);
  Input in = path.size() > 4 && path.substr(path.size() - 4) == ".npy"
                 ? ReadNpy(data, path)
                 : Input{ParseShape(shape), host::kFloat32, data};
  const int64_t n =
      std::accumulate(in.shape.begin(), in.shape.end(), int64_t{1}, std::multiplies<>());
  if (static_cast<size_t>(n) * (in.dtype.bits / 8) != in.bytes.size()) {
    throw host::Error("ERR_SHAPE_MISMATCH", path + " holds " + std::to_string(in.bytes.size()) +
                                                " bytes, not a tensor of the given shape");
  }
  return in;
}

std::string Bytes(const ffi::Tensor& t) {
  return std::string(static_cast<const char*>(t.data_ptr()), ffi::GetDataSize(t));
}

void PrintTop(const ffi::Tensor& y, int k) {
  if (y.dtype().code != kDLFloat || y.dtype().bits != 32) return;
  const float* v = static_cast<const float*>(y.data_ptr());
  const size_t n = ffi::GetDataSize(y) / 4;
  std::vector<size_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min<int>(k, static_cast<int>(n));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](size_t a, size_t b) { return v[a] > v[b]; });
  std::cout << "top-" << k << ":";
  for (int i = 0; i < k; ++i) std::cout << " " << idx[i] << " (" << v[idx[i]] << ")";
  std::cout << "\n";
}

int Timeout(host::Model& model, const ffi::Tensor& x, int ms, const std::string& want) {
  auto pending = model.Start({x});
  try {
    host::Model::Wait(pending, std::chrono::milliseconds(ms));
    std::cout << "async: finished within " << ms << " ms\n";
  } catch (const host::Error& e) {
    std::cout << "async: " << e.what() << "\n";
    pending.get();  // the run itself completes
  }
  const bool same = Bytes(model.Run({x})[0]) == want;
  std::cout << "after the wait: " << (same ? "identical" : "DIFFERENT") << "\n";
  return same ? 0 : 1;
}

int Threads(const std::string& model_path, host::Integrity integrity, const ffi::Tensor& x,
            int threads, int runs, const std::string& want) {
  std::atomic<int> same{0}, differ{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&]() {
      host::Model model(model_path, integrity);  // one VM per thread
      for (int r = 0; r < runs; ++r) (Bytes(model.Run({x})[0]) == want ? same : differ)++;
    });
  }
  for (std::thread& t : pool) t.join();
  std::cout << "threads: " << threads << " x " << runs << " runs, " << same << " identical, "
            << differ << " different\n";
  return differ == 0 ? 0 : 1;
}

}  // namespace

int RunLLM(int argc, char** argv);  // llm_loop.cc

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[2]) == "--prompt-ids") return RunLLM(argc, argv);
  if (argc < 3) {
    std::cerr
        << "usage: npu_host model.so input.npy|input.bin [--shape 1,3,224,224] [--top K] "
           "[--out y.bin]"
           " [--profile] [--threads N --runs M] [--timeout-ms T] [--no-verify]\n"
           "       npu_host lm.so --prompt-ids 1,2,3 [--max-new-tokens N] [--logits-out l.bin]"
           " [--no-verify]\n";
    return 2;
  }
  std::string shape, out;
  int top = 5, threads = 0, runs = 1, timeout_ms = -1;
  bool profile = false;
  host::Integrity integrity = host::Integrity::kRequireTrailer;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw host::Error("ERR_SHAPE_MISMATCH", a + " needs a value");
      return argv[++i];
    };
    if (a == "--shape") shape = next();
    else if (a == "--top") top = std::stoi(next());
    else if (a == "--out") out = next();
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--runs") runs = std::stoi(next());
    else if (a == "--profile") profile = true;
    else if (a == "--timeout-ms") timeout_ms = std::stoi(next());
    else if (a == "--no-verify") integrity = host::Integrity::kElfOnly;
    else {
      std::cerr << "unknown option " << a << "\n";
      return 2;
    }
  }
  try {
    Input in = Load(argv[2], shape);
    ffi::Tensor x = host::MakeTensor(in.shape, in.dtype, in.bytes.data());
    host::Model model(argv[1], integrity);
    std::vector<ffi::Tensor> ys = model.Run({x});
    PrintTop(ys[0], top);
    if (!out.empty()) std::ofstream(out, std::ios::binary) << Bytes(ys[0]);
    if (profile) std::cout << "profile: " << model.Profile() << "\n";
    if (timeout_ms >= 0 && Timeout(model, x, timeout_ms, Bytes(ys[0])) != 0) return 1;
    return threads > 0 ? Threads(argv[1], integrity, x, threads, runs, Bytes(ys[0])) : 0;
  } catch (const std::exception& e) {
    std::cerr << "npu_host: " << e.what() << "\n";
    return 1;
  }
}
