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
 * loads one exported without it (plain ex.export_library) with the ELF check only. A bad option
 * value prints the usage with exit status 2 (ranges in Usage below); --out is written whole or not at
 * all, and a failed write is exit status 1 naming the path and strerror (options.h).
 *
 *   npu_host lm.so --prompt-ids 1,2,3 --max-new-tokens 16 [--logits-out l.bin] [--no-verify]
 *
 * runs an LLM exported by lm.export_library (llm_loop.cc): prefill, then a greedy decode loop.
 */
#include <tvm_npu/host.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>
#include <thread>

#include "options.h"

namespace host = tvm_npu::host;
namespace ffi = tvm::ffi;

namespace {

struct Input {
  std::vector<int64_t> shape;
  DLDataType dtype = host::kFloat32;
  std::string bytes;
};

std::string ReadFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {  // a folder reads as a stream error
    throw host::Error("ERR_SHAPE_MISMATCH", "cannot read " + path + ": not a file");
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) throw host::Error("ERR_SHAPE_MISMATCH", "cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<int64_t> ParseShape(const std::string& text) {
  std::vector<int64_t> shape;
  std::stringstream ss(text);
  int64_t elements = 1;
  for (std::string dim; std::getline(ss, dim, ',');) {
    dim.erase(std::remove(dim.begin(), dim.end(), ' '), dim.end());
    const char* end = dim.data() + dim.size();
    int64_t n = 0;
    const auto [ptr, ec] = std::from_chars(dim.data(), end, n);
    // Each dimension and the element count at most 2^40: no file holds more, and the byte count
    // computed from them cannot overflow (std::stoll threw out_of_range on a long one).
    constexpr int64_t kMax = int64_t{1} << 40;
    if (ec != std::errc() || ptr != end || n < 0 || n > kMax || (n && elements > kMax / n)) {
      throw host::Error("ERR_SHAPE_MISMATCH", "bad shape '" + text + "': use e.g. 1,3,224,224");
    }
    elements *= n;
    shape.push_back(n);
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

// The limits of the numeric options: --threads x --runs inferences at most kMaxInferences, so that
// no value keeps the app busy for hours; --timeout-ms at most a day.
constexpr int64_t kMaxThreads = 64, kMaxRuns = 100000, kMaxInferences = 100000;

int Usage(const std::string& problem) {
  if (!problem.empty()) std::cerr << "npu_host: " << problem << "\n";
  std::cerr << "usage: npu_host model.so input.npy|input.bin [--shape 1,3,224,224] [--top K] "
               "[--out y.bin]"
               " [--profile] [--threads N --runs M] [--timeout-ms T] [--no-verify]\n"
               "       npu_host lm.so --prompt-ids 1,2,3 [--max-new-tokens N] [--logits-out l.bin]"
               " [--no-verify]\n"
               "  --top 1.."
            << (1 << 20) << ", --threads 0.." << kMaxThreads << ", --runs 1.." << kMaxRuns
            << " (threads x runs <= " << kMaxInferences << "), --timeout-ms 0..86400000\n";
  return 2;
}

int main(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {  // LLM mode wherever --prompt-ids stands among the options
    if (std::string(argv[i]) == "--prompt-ids") return RunLLM(argc, argv);
  }
  if (argc < 3) return Usage("");
  std::string shape, out;
  int64_t top = 5, threads = 0, runs = 1, timeout_ms = -1;
  bool profile = false;
  host::Integrity integrity = host::Integrity::kRequireTrailer;
  try {
    for (int i = 3; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw npu_host::UsageError(a + " needs a value");
        return argv[++i];
      };
      if (a == "--shape") shape = next();
      else if (a == "--top") top = npu_host::ParseInt(a, next(), 1, 1 << 20);
      else if (a == "--out") out = npu_host::OutputPath(a, next());
      else if (a == "--threads") threads = npu_host::ParseInt(a, next(), 0, kMaxThreads);
      else if (a == "--runs") runs = npu_host::ParseInt(a, next(), 1, kMaxRuns);
      else if (a == "--profile") profile = true;
      else if (a == "--timeout-ms") timeout_ms = npu_host::ParseInt(a, next(), 0, 86400000);
      else if (a == "--no-verify") integrity = host::Integrity::kElfOnly;
      else throw npu_host::UsageError("unknown option " + a);
    }
    if (threads * runs > kMaxInferences) {
      throw npu_host::UsageError("--threads " + std::to_string(threads) + " x --runs " +
                                 std::to_string(runs) + " is more than " +
                                 std::to_string(kMaxInferences) + " inferences");
    }
    npu_host::CheckApart("--out", out, {argv[1], argv[2]});
  } catch (const npu_host::UsageError& e) {
    return Usage(e.what());
  }
  try {
    Input in = Load(argv[2], shape);
    ffi::Tensor x = host::MakeTensor(in.shape, in.dtype, in.bytes.data());
    host::Model model(argv[1], integrity);
    std::vector<ffi::Tensor> ys = model.Run({x});
    PrintTop(ys[0], static_cast<int>(top));
    if (!out.empty()) npu_host::WriteFile(out, ys[0].data_ptr(), ffi::GetDataSize(ys[0]));
    if (profile) std::cout << "profile: " << model.Profile() << "\n";
    if (timeout_ms >= 0 && Timeout(model, x, static_cast<int>(timeout_ms), Bytes(ys[0])) != 0) {
      return 1;
    }
    return threads > 0 ? Threads(argv[1], integrity, x, static_cast<int>(threads),
                                 static_cast<int>(runs), Bytes(ys[0]))
                       : 0;
  } catch (const std::exception& e) {
    std::cerr << "npu_host: " << e.what() << "\n";
    return 1;
  }
}
