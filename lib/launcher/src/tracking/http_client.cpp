#include "tracking/http_client.hpp"

#include <cerrno>
#include <cstdlib>
#include <optional>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <openssl/ssl.h>
#include <boost/asio/ip/address.hpp>
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
// A connection the server left open is used again while it has been idle
// less than this (uvicorn closes them after 5 s, gunicorn sends "close"), and
// at most this many wait.
constexpr auto kIdleReuse = std::chrono::seconds(2);
constexpr std::size_t kIdleMax = 4;

std::chrono::milliseconds backoff(int attempt) { return std::chrono::milliseconds(attempt == 1 ? 50 : 200); }

bool retriable(int status) { return status == 429 || status == 502 || status == 503 || status == 504; }

std::string seconds_text(std::chrono::steady_clock::duration d) {
  auto tenths = (std::chrono::duration_cast<std::chrono::milliseconds>(d).count() + 50) / 100;
  return fmt::format("{:g}s", static_cast<double>(tenths) / 10);  // "1s", "2.5s"
}

}  // namespace

struct Call;

// One connection to the server: plain or TLS, fresh or kept from an earlier call.
struct Connection {
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  std::chrono::steady_clock::time_point idle_since;

  beast::tcp_stream& tcp() { return secure ? beast::get_lowest_layer(*secure) : *plain; }

  // Still open, with nothing unread: the server has neither closed it nor
  // sent anything (a TLS close_notify) since the last answer.
  bool reusable() {
    if (std::chrono::steady_clock::now() - idle_since >= kIdleReuse) return false;
    char byte = 0;
    auto n = ::recv(tcp().socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  void close() {
    error_code ignored;
    tcp().socket().close(ignored);
  }
};

struct HttpClient::State {
  asio::io_context& io;
  ServerUrl server;
  std::string authorization;
  std::optional<ssl::context> tls;
  std::string tls_error;                     // the CA bundle could not be read
  std::optional<asio::ip::address> address;  // the host is an IP address: nothing to resolve
  std::vector<std::weak_ptr<Call>> calls;
  std::vector<std::unique_ptr<Connection>> idle;  // open, answered, waiting for the next call

  // An idle connection still fit to carry a request, or null.
  std::unique_ptr<Connection> take_idle() {
    while (!idle.empty()) {
      auto conn = std::move(idle.back());
      idle.pop_back();
      if (conn->reusable()) return conn;
      conn->close();
    }
    return nullptr;
  }

  void keep(std::unique_ptr<Connection> conn) {
    if (idle.size() >= kIdleMax) return conn->close();
    conn->idle_since = std::chrono::steady_clock::now();
    idle.push_back(std::move(conn));
  }

  void close_idle() {
    for (auto& conn : idle) conn->close();
    idle.clear();
  }

  State(asio::io_context& i, ServerUrl s, std::string auth, const TlsOptions& options)
      : io(i), server(std::move(s)), authorization(std::move(auth)) {
    error_code not_an_address;
    auto parsed = asio::ip::make_address(server.host, not_an_address);
    if (!not_an_address) address = parsed;
    if (!server.tls) return;
    tls.emplace(ssl::context::tls_client);
    error_code ec;
    if (options.insecure) {
      tls->set_verify_mode(ssl::verify_none);
      return;
    }
    tls->set_verify_mode(ssl::verify_peer);
    if (options.ca_file.empty()) {
      tls->set_default_verify_paths(ec);
      // OpenSSL's own settings win (SSL_CERT_FILE, SSL_CERT_DIR); else the
      // system's bundle too, wherever this distribution keeps it.
      std::string bundle = ::getenv("SSL_CERT_FILE") == nullptr && ::getenv("SSL_CERT_DIR") == nullptr
                               ? system_ca_bundle([](const std::string& p) { return ::access(p.c_str(), R_OK) == 0; })
                               : "";
      error_code ignored;
      if (!bundle.empty()) tls->load_verify_file(bundle, ignored);
    } else
      tls->load_verify_file(options.ca_file, ec);
    if (ec) tls_error = fmt::format("cannot read the certificates {}: {}", options.ca_file, ec.message());
    tls->set_verify_callback(ssl::host_name_verification(server.host));
  }
};

// One request: (resolve, connect, TLS handshake, or an idle connection of an
// earlier call), write, read; tried again on a refused connection or a busy
// server; ended by its deadline.
struct Call : std::enable_shared_from_this<Call> {
  std::shared_ptr<HttpClient::State> client;
  Request request;
  HttpClient::Deadline deadline;
  HttpClient::Done done;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  int attempt = 0;
  bool finished = false;
  bool reused = false;  // this try's connection carried an earlier call
  asio::steady_timer deadline_timer;
  asio::steady_timer retry_timer;
  tcp::resolver resolver;
  std::unique_ptr<Connection> conn;
  std::unique_ptr<Connection> stale_conn;  // closed, kept until this call ends: its handler may still be running
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
    message.keep_alive(true);
    message.body() = request.body;
    message.prepare_payload();
  }

  void try_once() {
    ++attempt;
    buffer.clear();
    parser.emplace();
    parser->body_limit(kBodyLimit);
    // An idle connection is written at once: the request leaves now, even
    // when the loop is not run again for a while (the ranks being started).
    if (auto idle = client->take_idle()) {
      conn = std::move(idle);
      reused = true;
      return send();
    }
    connect();
  }

  void connect() {
    reused = false;
    conn = std::make_unique<Connection>();
    if (client->tls) {
      conn->secure.emplace(client->io, *client->tls);
      // SNI: servers behind a shared address pick their certificate by name.
      SSL_set_tlsext_host_name(conn->secure->native_handle(), client->server.host.c_str());
    } else {
      conn->plain.emplace(client->io);
    }
    if (client->address) {  // an IP address: no resolver thread to wait for
      return conn->tcp().async_connect(tcp::endpoint(*client->address, client->server.port),
                                       [self = shared_from_this()](error_code ec) { self->on_connect(ec); });
    }
    resolver.async_resolve(client->server.host, std::to_string(client->server.port),
                           [self = shared_from_this()](error_code ec, const tcp::resolver::results_type& results) {
                             if (self->finished) return;
                             if (ec) return self->fail(ec, "cannot resolve " + self->client->server.host);
                             self->conn->tcp().async_connect(
                                 results, [self](error_code ec2, const tcp::endpoint&) { self->on_connect(ec2); });
                           });
  }

  void on_connect(error_code ec) {
    if (finished) return;
    if (ec) return fail(ec, "cannot connect");
    // Each request leaves in one write when it fits the socket's buffer; a
    // bigger one (a long console log) must not wait, between its writes, for
    // the server to acknowledge the first (Nagle's algorithm).
    error_code ignored;
    conn->tcp().socket().set_option(tcp::no_delay(true), ignored);
    if (!conn->secure) return send();
    conn->secure->async_handshake(ssl::stream_base::client, [self = shared_from_this()](error_code ec2) {
      if (self->finished) return;
      if (ec2) return self->fail(ec2, "TLS handshake failed");
      self->send();
    });
  }

  void send() {
    if (conn->secure)
      write(*conn->secure);
    else
      write(*conn->plain);
  }

  template <class Stream>
  void write(Stream& stream) {
    http::async_write(stream, message, [self = shared_from_this(), &stream](error_code ec, std::size_t) {
      if (self->finished) return;
      if (ec) return self->stale() ? void() : self->fail(ec, "cannot send the request");
      http::async_read(stream, self->buffer, *self->parser, [self](error_code ec2, std::size_t) {
        if (self->finished) return;
        if (ec2) return self->stale() ? void() : self->fail(ec2, "no valid answer");
        bool keep_open = self->parser->keep_alive();
        auto response = self->parser->release();
        int status = static_cast<int>(response.result_int());
        if (retriable(status) && self->retry()) return;
        if (keep_open) self->client->keep(std::move(self->conn));
        self->finish({status, std::move(response.body()), "", false});
      });
    });
  }

  // A kept connection the server closed before it read the request (it had
  // not answered a byte): the request goes again at once on a new
  // connection, not counted as a try. True when it did.
  bool stale() {
    if (!reused || parser->got_some()) return false;
    conn->close();
    stale_conn = std::move(conn);
    buffer.clear();
    parser.emplace();
    parser->body_limit(kBodyLimit);
    connect();
    return true;
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
    resolver.cancel();
    if (conn) conn->close();
  }

  // `notify` false: the owner is gone, nobody is waiting for the answer.
  void finish(HttpResult result, bool notify = true) {
    if (finished) return;
    finished = true;
    if (!notify) done = nullptr;
    deadline_timer.cancel();
    retry_timer.cancel();
    close();  // a connection kept for the next call is no longer this call's
    // The handlers of the closed socket run later and see `finished`.
    asio::post(client->io, [self = shared_from_this(), result = std::move(result)]() mutable {
      auto f = std::move(self->done);
      if (f) f(std::move(result));
    });
  }
};

std::string system_ca_bundle(const std::function<bool(const std::string&)>& exists) {
  static const char* const candidates[] = {
      "/etc/ssl/certs/ca-certificates.crt",                 // Debian, Ubuntu, Arch
      "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  // RHEL 7+, Rocky, Fedora
      "/etc/pki/tls/certs/ca-bundle.crt",                   // older RHEL
      "/etc/ssl/ca-bundle.pem",                             // SUSE
      "/etc/ssl/cert.pem",                                  // Alpine
  };
  for (const char* path : candidates)
    if (exists(path)) return path;
  return "";
}

HttpClient::HttpClient(asio::io_context& io, ServerUrl server, std::string authorization, TlsOptions tls)
    : state_(std::make_shared<State>(io, std::move(server), std::move(authorization), tls)) {}

HttpClient::~HttpClient() {
  for (auto& weak : state_->calls)
    if (auto call = weak.lock()) call->finish({0, "", "cancelled", false}, false);
  state_->close_idle();
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
  state_->close_idle();
}

const ServerUrl& HttpClient::server() const { return state_->server; }

}  // namespace sgpu::launcher::mlflow
