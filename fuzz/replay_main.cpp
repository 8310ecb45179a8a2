// A fuzz target's driver without libFuzzer, for CTest in every build (not only the fuzz build):
// runs the target on each file of the given files and directories (in sorted order), then on
// deterministic mutations of each (one to three of: a byte changed, a range cut or repeated, the
// input spliced with another), so that the committed inputs and their neighbourhood are exercised
// on every test run. A finding is what it is under libFuzzer: an uncaught exception
// (std::terminate), a trap, a crash, or, under the sanitizer build, a report. Prints one line:
// inputs and runs.
//
//   replay [--mutations N] PATH...   (N per input; default 32)
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The input being run, for the fatal-signal handler to keep (libFuzzer keeps its crashing
// input too): a mutation is not in any file.
const std::string* g_current = nullptr;

void on_fatal_signal(int sig) {
  static const char kMessage[] = "replay: fatal signal; the input is in ./replay-crash\n";
  if (::write(2, kMessage, sizeof(kMessage) - 1) < 0) {
  }
  const int fd = ::open("replay-crash", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0 && g_current != nullptr) {
    if (::write(fd, g_current->data(), g_current->size()) < 0) {
    }
    ::close(fd);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void run(const std::string& input) {
  g_current = &input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  g_current = nullptr;
}

// xorshift64*: the same mutations on every machine and run.
struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
  }
  size_t below(size_t n) { return n == 0 ? 0 : size_t(next() % n); }
};

// Bytes the parsers treat specially, for the mutations to insert.
constexpr char kSpecial[] = "\n\r\t \"'\\{}[]:,&*!?-#|>%@`0123456789eE.+~\x00\xff";

std::string mutate(std::string s, const std::string& other, Rng& rng) {
  switch (rng.below(6)) {
    case 0:  // one byte changed
      if (!s.empty()) s[rng.below(s.size())] = char(rng.next());
      break;
    case 1:  // a special byte inserted
      s.insert(s.begin() + std::ptrdiff_t(rng.below(s.size() + 1)),
               kSpecial[rng.below(sizeof(kSpecial) - 1)]);
      break;
    case 2: {  // a range cut out
      const size_t at = rng.below(s.size() + 1);
      s.erase(at, rng.below(s.size() - at + 1));
      break;
    }
    case 3: {  // a range repeated in place
      const size_t at = rng.below(s.size() + 1);
      const std::string piece = s.substr(at, rng.below(64));
      s.insert(at, piece);
      break;
    }
    case 4:  // cut short
      s.resize(rng.below(s.size() + 1));
      break;
    default: {  // spliced: this input's head, another's tail
      const size_t at = rng.below(other.size() + 1);
      s = s.substr(0, rng.below(s.size() + 1)) + other.substr(at);
      break;
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  for (int sig : {SIGSEGV, SIGILL, SIGABRT, SIGFPE, SIGBUS}) std::signal(sig, on_fatal_signal);
  int mutations = 32;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mutations" && i + 1 < argc) {
      mutations = std::atoi(argv[++i]);
      continue;
    }
    const fs::path p(a);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "replay: no such file or directory: %s\n", a.c_str());
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "replay: no inputs\n");
    return 2;
  }
  std::vector<std::string> inputs;
  for (const fs::path& f : files) inputs.push_back(read_file(f));
  size_t runs = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    run(inputs[i]);
    ++runs;
    Rng rng{0x9e3779b97f4a7c15ull ^ (uint64_t(i + 1) * 0xff51afd7ed558ccdull)};
    for (int m = 0; m < mutations; ++m) {
      std::string input = inputs[i];
      for (size_t k = 1 + rng.below(3); k > 0; --k)
        input = mutate(std::move(input), inputs[rng.below(inputs.size())], rng);
      run(input);
      ++runs;
    }
  }
  std::printf("replay: %zu inputs, %zu runs, no finding\n", inputs.size(), runs);
  return 0;
}
