#pragma once
// A small HTTP/1.1 client for one tracking server on the caller's Asio loop
// (Boost.Beast; OpenSSL for https). Every call has a deadline and ends by it:
// a server that is down, slow or silent costs at most that long, and never
// blocks the loop.
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "tracking/mlflow_api.hpp"

namespace sgpu::launcher::mlflow {

struct TlsOptions {
  bool insecure = false;  // MLFLOW_TRACKING_INSECURE_TLS: no certificate check
  std::string ca_file;    // MLFLOW_TRACKING_SERVER_CERT_PATH: trust this bundle instead of the system's
};

// The distributions' CA bundles, in the order a binary built elsewhere looks
// for them (Debian/Ubuntu, RHEL/Rocky/Fedora, SUSE, older RHEL, Alpine): the
// portable build's OpenSSL knows only its own directory (/etc/ssl), which
// RHEL keeps no bundle in. The first of `candidates` that `exists`, else "".
std::string system_ca_bundle(const std::function<bool(const std::string&)>& exists);

struct HttpResult {
  int status = 0;     // the HTTP status; 0 when no answer came
  std::string body;   // the answer's body
  std::string error;  // why no answer came: "connection refused", "no answer within 5s"
  bool timed_out = false;
};

class HttpClient {
 public:
  using Deadline = std::chrono::steady_clock::time_point;
  using Done = std::function<void(HttpResult)>;

  // `authorization` is the Authorization header's value ("" for none).
  HttpClient(boost::asio::io_context& io, ServerUrl server, std::string authorization, TlsOptions tls);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends `request` on a connection an earlier call left open (idle under
  // 2 s; written at once, before this returns), else on a new one; calls in
  // flight together each have their own. A refused connection or a 429,
  // 502, 503, 504 answer is tried again (3 tries, 50 ms then 200 ms apart)
  // while time is left; a kept connection the server had closed, at once on
  // a new one. Calls `done` once, on the loop, by `deadline`.
  void send(Request request, Deadline deadline, Done done);

  // Ends every call in flight now: their `done` get an error ("cancelled").
  void cancel_all();

  const ServerUrl& server() const;

 private:
  friend struct Call;  // one request in flight (http_client.cpp)
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace sgpu::launcher::mlflow
