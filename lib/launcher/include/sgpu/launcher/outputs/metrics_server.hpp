#pragma once
// --metrics-port: a small HTTP server on the launcher's loop that answers
// GET /metrics with the job in Prometheus' text format (metrics_record.hpp)
// and nothing else. Bound to loopback unless --metrics-addr says otherwise;
// each request bounded in size and time; closed once the job is over, so it
// never holds the loop.
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

namespace sgpu::launcher {

class MetricsServer {
 public:
  // Listens now; throws sgpu::Error naming the address when it cannot.
  MetricsServer(boost::asio::io_context& io, const std::string& address, int port, std::function<std::string()> body);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  int port() const;
  void close();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace sgpu::launcher
