// The target on llama.cpp's RPC backend: a ggml-rpc-server started on 127.0.0.1 by this test
// (a bounded lifetime: `timeout` ends it if the test dies, and the test stops it by its PID),
// the target's layers placed on it, the draft local. Greedy output through RPC must equal the
// local run token for token, for plain and speculative decoding.
//
// Its own executable: an RPC server, once registered, is a device of the whole process, and
// the other llama.cpp tests must not see one that has stopped.

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <specdec/llama_cpp.hpp>
#include <specdec/specdec.hpp>

extern char** environ;

namespace {

namespace llama = specdec::llama_cpp;
using specdec::token_t;

/// A port nothing listens on now (the kernel's pick for an ephemeral bind).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

bool accepts_connections(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  close(fd);
  return ok;
}

/// ggml-rpc-server on 127.0.0.1:port for at most 300 s, stopped by the destructor.
class RpcServer {
 public:
  explicit RpcServer(int port) {
    const std::string port_text = std::to_string(port);
    std::vector<std::string> args{
        "timeout", "300", SPECDEC_RPC_SERVER, "-H", "127.0.0.1", "-p", port_text, "-t", "1"};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    if (posix_spawnp(&pid_, "timeout", nullptr, nullptr, argv.data(), environ) != 0) pid_ = -1;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (pid_ > 0 && !accepts_connections(port) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~RpcServer() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);  // timeout passes it on to the server
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;
  [[nodiscard]] bool running() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

std::vector<token_t> bytes_of(std::string_view text) {
  std::vector<token_t> tokens;
  for (const unsigned char byte : text) tokens.push_back(byte);
  return tokens;
}

TEST(LlamaCppRpc, TargetThroughRpcGivesTheLocalGreedyTokens) {
  const std::string gguf = SPECDEC_GGUF_DIR;
  specdec::GenerationConfig config;
  config.max_new_tokens = 64;
  config.draft_length = 6;
  config.sampling.temperature = 0;
  const std::vector<token_t> prompt = bytes_of("\nPsalms 23:1 ");

  // Local first: before any RPC device exists in the process.
  std::vector<token_t> local_plain, local_speculative;
  {
    auto target = llama::LoadedModel::load(gguf + "/kjv-target-f16.gguf");
    auto draft = llama::LoadedModel::load(gguf + "/kjv-draft-f16.gguf");
    config.max_context = target.max_context();
    local_plain = specdec::AutoregressiveDecoder(target).generate(prompt, config).tokens;
    specdec::SpeculativeDecoder speculative(draft, target);
    local_speculative = speculative.generate(prompt, config).tokens;
  }
  EXPECT_EQ(local_speculative, local_plain);

  const int port = free_port();
  RpcServer server(port);
  ASSERT_TRUE(server.running());
  ASSERT_TRUE(accepts_connections(port)) << "ggml-rpc-server did not start on port " << port;
  llama::ModelOptions remote, local;
  remote.devices = {llama::rpc_device("127.0.0.1:" + std::to_string(port))};
  local.cpu_only = true;
  auto target = llama::LoadedModel::load(gguf + "/kjv-target-f16.gguf", {}, remote);
  auto draft = llama::LoadedModel::load(gguf + "/kjv-draft-f16.gguf", {}, local);
  EXPECT_EQ(specdec::AutoregressiveDecoder(target).generate(prompt, config).tokens, local_plain);
  specdec::SpeculativeDecoder speculative(draft, target);
  target.reset();
  EXPECT_EQ(speculative.generate(prompt, config).tokens, local_plain);
}

TEST(LlamaCppRpc, AnEndpointWithoutAServerIsAClearError) {
  const int port = free_port();
  try {
    (void)llama::rpc_device("127.0.0.1:" + std::to_string(port));
    ADD_FAILURE() << "expected an error for an endpoint nobody listens on";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("did not answer"), std::string::npos) << error.what();
  }
}

}  // namespace
