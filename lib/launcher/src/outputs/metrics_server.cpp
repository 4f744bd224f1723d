#include "sgpu/launcher/outputs/metrics_server.hpp"

#include <chrono>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher {
namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {
constexpr std::size_t kMaxRequest = 16 << 10;
constexpr auto kRequestTime = std::chrono::seconds(10);
}  // namespace

struct MetricsServer::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io_, std::function<std::string()> b) : io(io_), acceptor(io_), body(std::move(b)) {}

  struct Session : std::enable_shared_from_this<Session> {
    Session(tcp::socket s, std::weak_ptr<Impl> o)
        : socket(std::move(s)), timer(socket.get_executor()), owner(std::move(o)) {}
    tcp::socket socket;
    asio::steady_timer timer;
    std::weak_ptr<Impl> owner;
    boost::beast::flat_buffer buffer{kMaxRequest};
    http::request_parser<http::empty_body> parser;
    http::response<http::string_body> response;

    void start() {
      parser.header_limit(kMaxRequest);
      timer.expires_after(kRequestTime);
      timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
        if (!ec) self->socket.close();  // a client that sends nothing is not waited for
      });
      http::async_read(socket, buffer, parser, [self = shared_from_this()](boost::beast::error_code ec, std::size_t) {
        if (ec) return self->end();
        self->answer();
      });
    }

    void answer() {
      const auto& req = parser.get();
      auto target = std::string(req.target());
      auto path = target.substr(0, target.find('?'));
      auto o = owner.lock();
      response.version(req.version());
      response.keep_alive(false);
      response.set(http::field::server, "sgpu");
      if (req.method() != http::verb::get && req.method() != http::verb::head) {
        response.result(http::status::method_not_allowed);
        response.set(http::field::allow, "GET, HEAD");
        response.body() = "only GET /metrics\n";
      } else if (path != "/metrics" || !o) {
        response.result(http::status::not_found);
        response.body() = "sgpu serves /metrics only\n";
      } else {
        response.result(http::status::ok);
        response.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
        response.body() = o->body();
      }
      if (req.method() == http::verb::head) {
        response.content_length(response.body().size());
        response.body().clear();
      } else {
        response.prepare_payload();
      }
      http::async_write(socket, response,
                        [self = shared_from_this()](boost::beast::error_code, std::size_t) { self->end(); });
    }

    void end() {
      boost::system::error_code ignored;
      socket.shutdown(tcp::socket::shutdown_both, ignored);
      socket.close(ignored);
      timer.cancel();
    }
  };

  void accept() {
    acceptor.async_accept([self = shared_from_this()](const boost::system::error_code& ec, tcp::socket s) {
      if (ec || !self->acceptor.is_open()) return;
      auto session = std::make_shared<Session>(std::move(s), self);
      std::erase_if(self->sessions, [](const std::weak_ptr<Session>& w) { return w.expired(); });
      self->sessions.push_back(session);
      session->start();
      self->accept();
    });
  }

  asio::io_context& io;
  tcp::acceptor acceptor;
  std::function<std::string()> body;
  std::vector<std::weak_ptr<Session>> sessions;  // open connections: closed with the server
};

MetricsServer::MetricsServer(asio::io_context& io, const std::string& address, int port,
                             std::function<std::string()> body)
    : impl_(std::make_shared<Impl>(io, std::move(body))) {
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(address, ec);
  if (ec)
    throw Error(
        fmt::format("--metrics-addr {}: not an IP address (e.g. 127.0.0.1, the default, or 0.0.0.0 for every "
                    "interface)",
                    address));
  tcp::endpoint at(addr, static_cast<unsigned short>(port));
  auto& a = impl_->acceptor;
  if (!a.open(at.protocol(), ec) && !a.set_option(asio::socket_base::reuse_address(true), ec) && !a.bind(at, ec))
    a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw Error(
        fmt::format("--metrics-port {}: cannot listen on {}:{}: {} (choose another port, or leave "
                    "--metrics-port out)",
                    port, address, port, ec.message()));
  impl_->accept();
}

MetricsServer::~MetricsServer() { close(); }

int MetricsServer::port() const { return impl_->acceptor.is_open() ? impl_->acceptor.local_endpoint().port() : 0; }

void MetricsServer::close() {
  boost::system::error_code ignored;
  impl_->acceptor.close(ignored);
  // A client that connected and sends nothing must not hold the loop past the job.
  for (auto& weak : std::exchange(impl_->sessions, {}))
    if (auto session = weak.lock()) session->end();
}

}  // namespace sgpu::launcher
