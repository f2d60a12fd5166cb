/*!
 * \file options.h
 * \brief npu_host's checked option values and output files (main.cc, llm_loop.cc).
 *
 * A number is parsed whole with std::from_chars and checked against its option's range: std::stoi
 * threw on "x" or "99999999999" outside any try, and the app died of SIGABRT. A bad value is a
 * UsageError, which main prints with the usage and exit status 2. An output is written to a temporary
 * file in its folder and renamed onto the path once complete, so a failed write (a read-only folder,
 * a path under a regular file, a full disk) leaves no partial file and is an Error naming the path and
 * strerror, never a silent success.
 */
#ifndef NPU_HOST_OPTIONS_H_
#define NPU_HOST_OPTIONS_H_

#include <sys/stat.h>
#include <tvm_npu/artifact.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace npu_host {

/*! \brief A bad command line: main prints the message, then the usage, and exits with 2. */
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& what) : std::runtime_error(what) {}
};

/*! \brief `text`, the whole of it, as an integer in [low, high]; else UsageError naming `option`. */
inline int64_t ParseInt(const std::string& option, const std::string& text, int64_t low,
                        int64_t high) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  const std::string range = "[" + std::to_string(low) + ", " + std::to_string(high) + "]";
  if (ec == std::errc::result_out_of_range ||
      (ec == std::errc() && ptr == end && (value < low || value > high))) {
    throw UsageError(option + " " + text + " is outside " + range);
  }
  if (ec != std::errc() || ptr != end) {
    throw UsageError(option + " '" + text + "' is not an integer: give one in " + range);
  }
  return value;
}

/*! \brief `path`, the value of the output option `option`; UsageError when it is empty (nothing would
 *         be written, silently). */
inline std::string OutputPath(const std::string& option, const std::string& path) {
  if (path.empty()) throw UsageError(option + " '': give a file path");
  return path;
}

/*! \brief True when `a` and `b` name one existing file (the same path, or a hard or symbolic link). */
inline bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

/*! \brief UsageError when the output `path` of `option` is one of `inputs`: writing it would destroy
 *         the input. */
inline void CheckApart(const std::string& option, const std::string& path,
                       const std::vector<std::string>& inputs) {
  for (const std::string& input : inputs) {
    if (!path.empty() && (path == input || SameFile(path, input))) {
      throw UsageError(option + " " + path + " is the input " + input +
                       ": writing it would destroy the input; give another output path");
    }
  }
}

/*! \brief Write `size` bytes at `data` to `path` whole or not at all: a temporary file next to it,
 *         renamed onto it. A failure is Error ERR_INVALID_CONFIG with the path and strerror. */
inline void WriteFile(const std::string& path, const void* data, size_t size) {
  std::string tmp = path + ".tmp.XXXXXX";
  bool created = false;
  auto fail = [&](const std::string& step) {
    const int err = errno;
    if (created) unlink(tmp.c_str());
    throw tvm_npu::host::Error("ERR_INVALID_CONFIG", "cannot write '" + path + "' (" + step +
                                                         "): " + std::strerror(err) +
                                                         "; choose a path in a writable folder");
  };
  const int fd = mkstemp(tmp.data());
  if (fd < 0) fail("create a temporary file next to it");
  created = true;
  // mkstemp makes the file 0600; give it the mode a plain open() would (0666 less the umask; umask
  // is read by setting it, so this runs before any thread starts).
  const mode_t mask = umask(0);
  umask(mask);
  if (fchmod(fd, 0666 & ~mask) != 0) {
    close(fd);
    fail("set its mode");
  }
  const char* p = static_cast<const char*>(data);
  for (size_t done = 0; done < size;) {
    const ssize_t n = write(fd, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      fail("write");
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) fail("close");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("rename onto it");
}

}  // namespace npu_host

#endif  // NPU_HOST_OPTIONS_H_
