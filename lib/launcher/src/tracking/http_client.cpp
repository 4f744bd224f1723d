#include "tracking/http_client.hpp"

#include <optional>
#include <vector>

#include <fmt/format.h>
#include <openssl/ssl.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

namespace sgpu::launcher::mlflow {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using boost::system::error_code;

constexpr int kTries = 3;
constexpr std::uint64_t kBodyLimit = 8 << 20;

std::chrono::milliseconds backoff(int attempt) { return std::chrono::milliseconds(attempt == 1 ? 50 : 200); }

bool retriable(int status) { return status == 429 || status == 502 || status == 503 || status == 504; }

std::string seconds_text(std::chrono::steady_clock::duration d) {
  auto tenths = (std::chrono::duration_cast<std::chrono::milliseconds>(d).count() + 50) / 100;
  return fmt::format("{:g}s", static_cast<double>(tenths) / 10);  // "1s", "2.5s"
}

}  // namespace

struct Call;

struct HttpClient::State {
  asio::io_context& io;
  ServerUrl server;
  std::string authorization;
  std::optional<ssl::context> tls;
  std::string tls_error;  // the CA bundle could not be read
  std::vector<std::weak_ptr<Call>> calls;

  State(asio::io_context& i, ServerUrl s, std::string auth, const TlsOptions& options)
      : io(i), server(std::move(s)), authorization(std::move(auth)) {
    if (!server.tls) return;
    tls.emplace(ssl::context::tls_client);
    error_code ec;
    if (options.insecure) {
      tls->set_verify_mode(ssl::verify_none);
      return;
    }
    tls->set_verify_mode(ssl::verify_peer);
    if (options.ca_file.empty())
      tls->set_default_verify_paths(ec);
    else
      tls->load_verify_file(options.ca_file, ec);
    if (ec) tls_error = fmt::format("cannot read the certificates {}: {}", options.ca_file, ec.message());
    tls->set_verify_callback(ssl::host_name_verification(server.host));
  }
};

// One request: resolve, connect, (TLS handshake), write, read; tried again
// on a refused connection or a busy server; ended by its deadline.
struct Call : std::enable_shared_from_this<Call> {
  std::shared_ptr<HttpClient::State> client;
  Request request;
  HttpClient::Deadline deadline;
  HttpClient::Done done;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  int attempt = 0;
  bool finished = false;
  asio::steady_timer deadline_timer;
  asio::steady_timer retry_timer;
  tcp::resolver resolver;
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  beast::flat_buffer buffer;
  http::request<http::string_body> message;
  std::optional<http::response_parser<http::string_body>> parser;

  Call(std::shared_ptr<HttpClient::State> c, Request r, HttpClient::Deadline d, HttpClient::Done f)
      : client(std::move(c)),
        request(std::move(r)),
        deadline(d),
        done(std::move(f)),
        deadline_timer(client->io),
        retry_timer(client->io),
        resolver(client->io) {}

  beast::tcp_stream& socket() { return secure ? beast::get_lowest_layer(*secure) : *plain; }

  void start() {
    if (!client->tls_error.empty()) return finish({0, "", client->tls_error, false});
    deadline_timer.expires_at(deadline);
    deadline_timer.async_wait([self = shared_from_this()](error_code ec) {
      if (ec) return;
      self->finish({0, "", fmt::format("no answer within {}", seconds_text(self->deadline - self->started)), true});
    });
    build_message();
    try_once();
  }

  void build_message() {
    message.method_string(request.method);
    message.target(request.target);
    message.version(11);
    auto port = client->server.port;
    bool default_port = port == (client->server.tls ? 443 : 80);
    message.set(http::field::host,
                default_port ? client->server.host : fmt::format("{}:{}", client->server.host, port));
    message.set(http::field::user_agent, "sgpu");
    message.set(http::field::accept, "application/json");
    if (!client->authorization.empty()) message.set(http::field::authorization, client->authorization);
    if (!request.content_type.empty()) message.set(http::field::content_type, request.content_type);
    message.keep_alive(false);
    message.body() = request.body;
    message.prepare_payload();
  }

  void try_once() {
    ++attempt;
    plain.reset();
    secure.reset();
    if (client->tls) {
      secure.emplace(client->io, *client->tls);
      // SNI: servers behind a shared address pick their certificate by name.
      SSL_set_tlsext_host_name(secure->native_handle(), client->server.host.c_str());
    } else {
      plain.emplace(client->io);
    }
    buffer.clear();
    parser.emplace();
    parser->body_limit(kBodyLimit);
    resolver.async_resolve(client->server.host, std::to_string(client->server.port),
                           [self = shared_from_this()](error_code ec, const tcp::resolver::results_type& results) {
                             if (self->finished) return;
                             if (ec) return self->fail(ec, "cannot resolve " + self->client->server.host);
                             self->socket().async_connect(
                                 results, [self](error_code ec2, const tcp::endpoint&) { self->on_connect(ec2); });
                           });
  }

  void on_connect(error_code ec) {
    if (finished) return;
    if (ec) return fail(ec, "cannot connect");
    if (!secure) return write(*plain);
    secure->async_handshake(ssl::stream_base::client, [self = shared_from_this()](error_code ec2) {
      if (self->finished) return;
      if (ec2) return self->fail(ec2, "TLS handshake failed");
      self->write(*self->secure);
    });
  }

  template <class Stream>
  void write(Stream& stream) {
    http::async_write(stream, message, [self = shared_from_this(), &stream](error_code ec, std::size_t) {
      if (self->finished) return;
      if (ec) return self->fail(ec, "cannot send the request");
      http::async_read(stream, self->buffer, *self->parser, [self](error_code ec2, std::size_t) {
        if (self->finished) return;
        if (ec2) return self->fail(ec2, "no valid answer");
        auto response = self->parser->release();
        int status = static_cast<int>(response.result_int());
        if (retriable(status) && self->retry()) return;
        self->finish({status, std::move(response.body()), "", false});
      });
    });
  }

  // True when another try was scheduled.
  bool retry() {
    if (attempt >= kTries || std::chrono::steady_clock::now() + backoff(attempt) >= deadline) return false;
    close();
    retry_timer.expires_after(backoff(attempt));
    retry_timer.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec && !self->finished) self->try_once();
    });
    return true;
  }

  void fail(error_code ec, const std::string& what) {
    if (ec == asio::error::connection_refused && retry()) return;
    finish({0, "", fmt::format("{}: {}", what, ec.message()), false});
  }

  void close() {
    error_code ignored;
    resolver.cancel();
    socket().socket().close(ignored);
  }

  // `notify` false: the owner is gone, nobody is waiting for the answer.
  void finish(HttpResult result, bool notify = true) {
    if (finished) return;
    finished = true;
    if (!notify) done = nullptr;
    deadline_timer.cancel();
    retry_timer.cancel();
    if (plain || secure) close();
    // The handlers of the closed socket run later and see `finished`.
    asio::post(client->io, [self = shared_from_this(), result = std::move(result)]() mutable {
      auto f = std::move(self->done);
      if (f) f(std::move(result));
    });
  }
};

HttpClient::HttpClient(asio::io_context& io, ServerUrl server, std::string authorization, TlsOptions tls)
    : state_(std::make_shared<State>(io, std::move(server), std::move(authorization), tls)) {}

HttpClient::~HttpClient() {
  for (auto& weak : state_->calls)
    if (auto call = weak.lock()) call->finish({0, "", "cancelled", false}, false);
}

void HttpClient::send(Request request, Deadline deadline, Done done) {
  auto call = std::make_shared<Call>(state_, std::move(request), deadline, std::move(done));
  std::erase_if(state_->calls, [](const auto& weak) { return weak.expired(); });
  state_->calls.push_back(call);
  call->start();
}

void HttpClient::cancel_all() {
  for (auto& weak : state_->calls)
    if (auto call = weak.lock()) call->finish({0, "", "cancelled", false});
  state_->calls.clear();
}

const ServerUrl& HttpClient::server() const { return state_->server; }

}  // namespace sgpu::launcher::mlflow
