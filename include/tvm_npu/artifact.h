/*!
 * \file tvm_npu/artifact.h
 * \brief The checks host::Model runs on an exported library before dlopen (header-only, no TVM).
 *
 * The dynamic loader trusts a shared library's bytes: a flipped byte in its relocations or dynamic
 * section ends the process with SIGSEGV inside dlopen, a truncated file with SIGBUS. So
 * tvm_npu.export_library appends an integrity trailer after the ELF image (the loader never reads
 * past the last section), and ReadArtifact verifies it (python/tvm_npu/runtime/artifact.py writes
 * and checks the same 56 bytes):
 *
 *   offset  bytes  field
 *   0       8      magic "NPU-SEAL"
 *   8       4      format version (1), little-endian
 *   12      4      reserved, 0
 *   16      8      payload bytes: the file's size without the trailer
 *   24      32     SHA-256 of the payload (FIPS 180-4, implemented below)
 */
#ifndef TVM_NPU_ARTIFACT_H_
#define TVM_NPU_ARTIFACT_H_

#include <sys/stat.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace tvm_npu {
namespace host {

/*! \brief An error with a tvm_npu code ("ERR_TIMEOUT: ..."), as the Python side raises NPUError. */
class Error : public std::runtime_error {
 public:
  Error(const std::string& code, const std::string& what)
      : std::runtime_error(code + ": " + what), code_(code) {}
  const std::string& code() const { return code_; }

 private:
  std::string code_;
};

/*! \brief SHA-256 of `size` bytes at `data` (FIPS 180-4). */
inline std::array<uint8_t, 32> Sha256(const uint8_t* data, size_t size) {
  static constexpr uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
      0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
      0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
      0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
      0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
      0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
      0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
      0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
      0xc67178f2};
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  auto block = [&](const uint8_t* p) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = uint32_t{p[4 * i]} << 24 | uint32_t{p[4 * i + 1]} << 16 | uint32_t{p[4 * i + 2]} << 8 |
             uint32_t{p[4 * i + 3]};
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 =
          hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
  };
  size_t whole = size / 64 * 64;
  for (size_t at = 0; at < whole; at += 64) block(data + at);
  // The tail, a 1 bit, zeros, and the message length in bits (big-endian) in one or two blocks.
  uint8_t tail[128] = {};
  const size_t rest = size - whole, tail_bytes = rest < 56 ? 64 : 128;
  if (rest > 0) std::memcpy(tail, data + whole, rest);
  tail[rest] = 0x80;
  const uint64_t bits = uint64_t{size} * 8;
  for (int i = 0; i < 8; ++i) tail[tail_bytes - 1 - i] = static_cast<uint8_t>(bits >> (8 * i));
  for (size_t at = 0; at < tail_bytes; at += 64) block(tail + at);
  std::array<uint8_t, 32> out;
  for (int i = 0; i < 32; ++i) out[i] = static_cast<uint8_t>(h[i / 4] >> (24 - 8 * (i % 4)));
  return out;
}

constexpr char kTrailerMagic[8] = {'N', 'P', 'U', '-', 'S', 'E', 'A', 'L'};  // no NUL: 8 bytes
constexpr uint32_t kTrailerVersion = 1;
constexpr size_t kTrailerBytes = 56;

/*! \brief What host::Model checks before dlopen. */
enum class Integrity {
  kRequireTrailer,  //!< the trailer of tvm_npu.export_library, then the ELF structure (default)
  kElfOnly,  //!< a library exported without the trailer (plain ex.export_library) that you trust
};

namespace detail {

template <typename T>
T Load(const std::vector<uint8_t>& d, size_t at) {
  T v;
  std::memcpy(&v, d.data() + at, sizeof(T));  // little-endian host, as the file
  return v;
}

inline constexpr char kUnverified[] =
    "; to load a library you trust that was exported without the trailer (plain "
    "ex.export_library), pass Integrity::kElfOnly to host::Model (npu_host --no-verify)";

/*! \brief Check and strip the trailer of `d` (the bytes of `path`). */
inline void VerifyTrailer(const std::string& path, std::vector<uint8_t>* d, Integrity integrity) {
  const bool sealed = d->size() >= kTrailerBytes &&
                      std::memcmp(d->data() + d->size() - kTrailerBytes, kTrailerMagic, 8) == 0;
  if (!sealed) {
    if (integrity == Integrity::kElfOnly) return;
    throw Error("ERR_BAD_ARTIFACT",
                path + " (" + std::to_string(d->size()) +
                    " bytes) ends without tvm_npu's integrity trailer (truncated, or not written "
                    "by tvm_npu.export_library): export the model again with "
                    "tvm_npu.export_library(ex, path) (or `tvm-npu compile`)" +
                    kUnverified);
  }
  const size_t at = d->size() - kTrailerBytes, payload = at;
  const uint32_t version = Load<uint32_t>(*d, at + 8), reserved = Load<uint32_t>(*d, at + 12);
  const uint64_t length = Load<uint64_t>(*d, at + 16);
  std::array<uint8_t, 32> digest;
  std::memcpy(digest.data(), d->data() + at + 24, 32);
  d->resize(payload);
  if (integrity == Integrity::kElfOnly) return;
  const std::string again =
      "; the file is damaged: export the model again with tvm_npu.export_library(ex, path), or "
      "copy it again";
  if (version != kTrailerVersion || reserved != 0) {
    throw Error("ERR_BAD_ARTIFACT",
                path + ": integrity trailer version " + std::to_string(version) +
                    " (reserved word " + std::to_string(reserved) + "); this host reads version " +
                    std::to_string(kTrailerVersion) + " with a zero reserved word" + again);
  }
  if (length != payload) {
    throw Error("ERR_BAD_ARTIFACT",
                path + ": the integrity trailer describes " + std::to_string(length) +
                    " bytes of library, the file holds " + std::to_string(payload) + again);
  }
  if (Sha256(d->data(), payload) != digest) {
    throw Error("ERR_BAD_ARTIFACT",
                path + ": SHA-256 of the library disagrees with its trailer" + again);
  }
}

/*! \brief Why `d` is not a whole 64-bit little-endian ELF file (header tables and every segment's
 *         file bytes inside it), or "". */
inline std::string ElfProblem(const std::vector<uint8_t>& d) {
  if (d.size() < 64 ||
      std::memcmp(d.data(),
                  "\x7f"
                  "ELF",
                  4) != 0 ||
      d[4] != 2 || d[5] != 1) {
    return std::to_string(d.size()) + " bytes without a 64-bit ELF header";
  }
  const uint64_t phoff = Load<uint64_t>(d, 32), shoff = Load<uint64_t>(d, 40);
  const uint64_t phentsize = Load<uint16_t>(d, 54), phnum = Load<uint16_t>(d, 56);
  if (phentsize < 56 || phoff + phnum * phentsize > d.size() ||
      shoff + uint64_t{Load<uint16_t>(d, 58)} * Load<uint16_t>(d, 60) > d.size()) {
    return "its header tables end past the file's end";
  }
  for (uint64_t i = 0; i < phnum; ++i) {
    const uint64_t entry = phoff + i * phentsize;
    if (Load<uint64_t>(d, entry + 8) + Load<uint64_t>(d, entry + 32) > d.size()) {
      return "segment " + std::to_string(i) + " ends past the file's end";
    }
  }
  return "";
}

}  // namespace detail

/*!
 * \brief Throw ERR_BAD_ARTIFACT unless `path` is safe to dlopen: its integrity trailer matches (with
 *        Integrity::kRequireTrailer), and it is a whole 64-bit little-endian ELF file.
 */
inline void CheckArtifact(const std::string& path,
                          Integrity integrity = Integrity::kRequireTrailer) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {  // a folder reads as a stream error
    throw Error("ERR_BAD_ARTIFACT", "cannot open the library " + path + ": not a file");
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("ERR_BAD_ARTIFACT", "cannot open the library " + path);
  std::vector<uint8_t> d((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  detail::VerifyTrailer(path, &d, integrity);
  const std::string problem = detail::ElfProblem(d);
  if (!problem.empty()) {
    throw Error("ERR_BAD_ARTIFACT",
                path + " is not a complete shared library (" + problem +
                    "); export the model again with tvm_npu.export_library(ex, path)");
  }
}

}  // namespace host
}  // namespace tvm_npu

#endif  // TVM_NPU_ARTIFACT_H_
