/*!
 * \file llm_loop.cc
 * \brief npu_host's LLM mode: prefill a prompt, then a greedy decode loop, from the one library of
 *        lm.export_library (include/tvm_npu/llm_host.h).
 *
 *   npu_host lm.so --prompt-ids 1,2,3 [--max-new-tokens 16] [--logits-out l.bin] [--no-verify]
 *
 * Prints the new token ids (as `tvm-npu generate` does), then per step the host's wall-clock
 * tokens/s and the cycle model's (NPU regions only, at the configuration's clock). Bad input
 * (a prompt longer than max_context, an id outside the vocabulary, ...) is a coded error on stderr
 * and exit status 1. --logits-out writes the logits each token was picked from (prefill's last row,
 * then each decode step's: float32 [vocab] each, raw), for comparing with Python bit for bit.
 */
#include <tvm_npu/llm_host.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "options.h"

namespace host = tvm_npu::host;

namespace {

int64_t ParseInt(const std::string& text, const std::string& what) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw host::Error("ERR_SHAPE_MISMATCH", what + " '" + text + "' is not an integer");
  }
  return v;
}

std::vector<int64_t> ParseIds(const std::string& text) {
  std::vector<int64_t> ids;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) ids.push_back(ParseInt(item, "token id"));
  if (ids.empty()) throw host::Error("ERR_SHAPE_MISMATCH", "--prompt-ids is empty");
  return ids;
}

std::string Speed(const char* name, int64_t tokens, double seconds, uint64_t cycles,
                  int64_t clock_mhz) {
  char line[256];
  if (tokens == 0) {
    std::snprintf(line, sizeof(line), "%s: no tokens", name);
    return line;
  }
  const double npu = cycles ? tokens * clock_mhz * 1e6 / static_cast<double>(cycles) : 0.0;
  std::snprintf(line, sizeof(line),
                "%s: %lld tokens, %llu NPU cycles: cycle model %.1f tokens/s at %lld MHz (NPU "
                "regions only); host wall %.1f tokens/s",
                name, static_cast<long long>(tokens), static_cast<unsigned long long>(cycles), npu,
                static_cast<long long>(clock_mhz), seconds > 0 ? tokens / seconds : 0.0);
  return line;
}

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int Usage(const std::string& problem);  // main.cc

int RunLLM(int argc, char** argv) {
  try {
    std::vector<int64_t> ids;
    int64_t max_new = 16;
    std::string logits_out;
    host::Integrity integrity = host::Integrity::kRequireTrailer;
    for (int i = 2; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw host::Error("ERR_SHAPE_MISMATCH", a + " needs a value");
        return argv[++i];
      };
      if (a == "--prompt-ids") {
        ids = ParseIds(next());
      } else if (a == "--max-new-tokens") {
        max_new = ParseInt(next(), "--max-new-tokens");
      } else if (a == "--logits-out") {
        logits_out = npu_host::OutputPath(a, next());
      } else if (a == "--no-verify") {
        integrity = host::Integrity::kElfOnly;
      } else {
        throw npu_host::UsageError("unknown option " + a);
      }
    }
    npu_host::CheckApart("--logits-out", logits_out, {argv[1]});
    host::LLM lm(argv[1], integrity);
    // The prefill alone first (its cycles and time), then the decode loop; the same tokens as
    // lm.Generate(ids, max_new).
    lm.ResetCycles();
    auto start = std::chrono::steady_clock::now();
    std::vector<float> logits;
    if (max_new > 0) {
      // max_new - 1 compared with the rows left: ids.size() + max_new overflows for a max_new near 2^63
      const int64_t left = lm.max_context() - static_cast<int64_t>(ids.size());
      const std::string need = max_new - 1 > left
                                   ? std::to_string(static_cast<uint64_t>(ids.size()) +
                                                    static_cast<uint64_t>(max_new) - 1)
                                   : "";
      if (!need.empty()) {
        throw host::Error("ERR_LLM_CONTEXT",
                          std::to_string(ids.size()) + " prompt tokens + " +
                              std::to_string(max_new) + " new ones need " + need +
                              " cache rows, max_context is " + std::to_string(lm.max_context()) +
                              ": ask for fewer new tokens or compile with a larger max_context");
      }
    } else if (max_new < 0) {
      throw host::Error("ERR_SHAPE_MISMATCH", "--max-new-tokens must be >= 0");
    }
    logits = lm.Prefill(ids);
    const double prefill_s = Since(start);
    const uint64_t prefill_cycles = lm.Cycles();
    lm.ResetCycles();
    start = std::chrono::steady_clock::now();
    std::vector<int64_t> out;
    std::vector<float> seen;  // the logits of every step, for --logits-out
    int64_t decodes = 0;
    for (int64_t i = 0; i < max_new; ++i) {
      seen.insert(seen.end(), logits.begin(), logits.end());
      out.push_back(std::max_element(logits.begin(), logits.end()) - logits.begin());
      if (i + 1 < max_new) {
        logits = lm.Decode(out.back());
        ++decodes;
      }
    }
    const double decode_s = Since(start);
    if (!logits_out.empty())
      npu_host::WriteFile(logits_out, seen.data(), seen.size() * sizeof(float));
    std::cout << "new tokens: ";
    for (size_t i = 0; i < out.size(); ++i) std::cout << (i ? "," : "") << out[i];
    std::cout << "\n"
              << Speed("prefill", static_cast<int64_t>(ids.size()), prefill_s, prefill_cycles,
                       lm.clock_mhz())
              << "\n"
              << Speed("decode", decodes, decode_s, lm.Cycles(), lm.clock_mhz()) << "\n";
    return 0;
  } catch (const npu_host::UsageError& e) {
    return Usage(e.what());
  } catch (const std::exception& e) {
    std::cerr << "npu_host: " << e.what() << "\n";
    return 1;
  }
}
