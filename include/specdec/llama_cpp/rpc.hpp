#pragma once
/// \file
/// \brief A llama.cpp RPC server (ggml-rpc-server) as a device to offload layers to: rpc_device,
/// which first checks over a POSIX socket that the server answers.

#include <llama.h>

#include <cstddef>
#include <string>

#if __has_include(<netdb.h>) && __has_include(<sys/socket.h>) && __has_include(<unistd.h>)
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>
#define SPECDEC_LLAMA_CPP_HAS_SOCKETS 1
#endif

#include "specdec/llama_cpp/backend.hpp"
#include "specdec/llama_cpp/detail/error.hpp"

namespace specdec::llama_cpp {

namespace detail {

/// Whether a TCP connection to "host:port" succeeds. llama.cpp's RPC client aborts the process
/// when its server does not answer, so rpc_device() asks first. Without POSIX sockets: true.
[[nodiscard]] inline bool accepts_connections(const std::string& endpoint) {
#ifdef SPECDEC_LLAMA_CPP_HAS_SOCKETS
  const std::size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) return false;
  const std::string host = endpoint.substr(0, colon);
  const std::string port = endpoint.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) return false;
  bool connected = false;
  for (addrinfo* a = found; a != nullptr && !connected; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    connected = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
  }
  freeaddrinfo(found);
  return connected;
#else
  (void)endpoint;
  return true;
#endif
}

}  // namespace detail

/// \brief Registers the llama.cpp RPC server at `endpoint` ("host:port") and returns its
/// device, for ModelOptions::devices (null-terminated list). \throws std::invalid_argument if
/// this llama.cpp was built without the RPC backend or the server does not answer.
[[nodiscard]] inline ggml_backend_dev_t rpc_device(const std::string& endpoint) {
  detail::ensure_backend();
  ggml_backend_reg_t rpc = ggml_backend_reg_by_name("RPC");
  if (rpc == nullptr) {  // a build with dynamically loaded backends
    ggml_backend_load_all();
    rpc = ggml_backend_reg_by_name("RPC");
  }
  if (rpc == nullptr) {
    detail::throw_invalid_argument("RPC endpoint '", endpoint,
                                   "': this llama.cpp has no RPC backend; expected one built "
                                   "with -DGGML_RPC=ON");
  }
  if (!detail::accepts_connections(endpoint)) {
    detail::throw_invalid_argument("RPC endpoint '", endpoint,
                                   "' did not answer; expected a running ggml-rpc-server there "
                                   "(host:port)");
  }
  using AddServer = ggml_backend_reg_t (*)(const char*);
  const auto add_server = reinterpret_cast<AddServer>(
      ggml_backend_reg_get_proc_address(rpc, "ggml_backend_rpc_add_server"));
  if (add_server == nullptr) {
    detail::throw_invalid_argument("RPC endpoint '", endpoint,
                                   "': this llama.cpp's RPC backend has no "
                                   "ggml_backend_rpc_add_server");
  }
  ggml_backend_reg_t server = add_server(endpoint.c_str());
  if (server == nullptr || ggml_backend_reg_dev_count(server) == 0) {
    detail::throw_invalid_argument("RPC endpoint '", endpoint,
                                   "' did not answer; expected a running ggml-rpc-server there");
  }
  // add_server returns the same registry for an endpoint seen before: register it once.
  bool registered = false;
  for (std::size_t i = 0; i < ggml_backend_reg_count(); ++i) {
    registered = registered || ggml_backend_reg_get(i) == server;
  }
  if (!registered) ggml_backend_register(server);
  return ggml_backend_reg_dev_get(server, 0);
}

}  // namespace specdec::llama_cpp
