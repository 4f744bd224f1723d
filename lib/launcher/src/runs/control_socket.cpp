#include "sgpu/launcher/runs/control_socket.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/print.hpp"

namespace sgpu::launcher {
namespace asio = boost::asio;
using local = asio::local::stream_protocol;
using nlohmann::json;

namespace {
constexpr std::size_t kMaxRequest = 4096;

// An O_PATH descriptor of `dir` and the short path that reaches `name` in it.
struct DirPath {
  int fd = -1;
  std::string path;
  explicit DirPath(const std::string& dir, const char* name) {
    fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) path = fmt::format("/proc/self/fd/{}/{}", fd, name);
  }
  ~DirPath() {
    if (fd >= 0) ::close(fd);
  }
  DirPath(const DirPath&) = delete;
  DirPath& operator=(const DirPath&) = delete;
};

bool same_user(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == ::getuid();
}
}  // namespace

struct ControlSocket::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io_, Handler h) : io(io_), acceptor(io_), handler(std::move(h)) {}

  struct Session : std::enable_shared_from_this<Session> {
    explicit Session(local::socket s, std::weak_ptr<Impl> o) : socket(std::move(s)), owner(std::move(o)) {}
    local::socket socket;
    std::weak_ptr<Impl> owner;
    asio::streambuf in{kMaxRequest};
    std::string out;

    void start() {
      asio::async_read_until(socket, in, '\n', [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
        if (ec) return;
        std::string line(asio::buffers_begin(self->in.data()), asio::buffers_end(self->in.data()));
        json request;
        try {
          request = json::parse(line);
        } catch (const json::exception& e) {
          return self->send({{"ok", false}, {"error", fmt::format("not a JSON request: {}", e.what())}});
        }
        auto o = self->owner.lock();
        if (!o) return;
        o->handler(request, [self](const json& reply) { self->send(reply); });
      });
    }
    void send(const json& reply) {
      out = reply.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
      asio::async_write(socket, asio::buffer(out), [self = shared_from_this()](boost::system::error_code, std::size_t) {
        boost::system::error_code ignored;
        self->socket.shutdown(local::socket::shutdown_both, ignored);
      });
    }
  };

  void accept() {
    acceptor.async_accept([self = shared_from_this()](boost::system::error_code ec, local::socket s) {
      if (ec == asio::error::operation_aborted || !self->acceptor.is_open()) return;
      if (!ec && same_user(s.native_handle())) std::make_shared<Session>(std::move(s), self)->start();
      self->accept();
    });
  }

  asio::io_context& io;
  local::acceptor acceptor;
  Handler handler;
  std::string path;  // the socket's real path, removed at the end
};

ControlSocket::ControlSocket(asio::io_context& io, const std::string& run_dir, Handler handler)
    : impl_(std::make_shared<Impl>(io, std::move(handler))) {
  DirPath dir(run_dir, kControlSocketName);
  auto real = (std::filesystem::path(run_dir) / kControlSocketName).string();
  try {
    if (dir.fd < 0) throw boost::system::system_error(errno, boost::system::generic_category());
    ::unlink(real.c_str());
    impl_->acceptor.open(local());
    impl_->acceptor.bind(local::endpoint(dir.path));
    impl_->acceptor.listen(16);
    impl_->path = real;
    impl_->accept();
  } catch (const boost::system::system_error& e) {
    diagnostic("sgpu: warning: cannot listen at {} (sgpu stacks will not reach this run): {}\n", real,
               e.code().message());
    boost::system::error_code ignored;
    impl_->acceptor.close(ignored);
  }
}

ControlSocket::~ControlSocket() {
  boost::system::error_code ignored;
  impl_->acceptor.close(ignored);
  if (!impl_->path.empty()) ::unlink(impl_->path.c_str());
}

json ask_run(const std::string& run_dir, const json& request, int timeout_s) {
  DirPath dir(run_dir, kControlSocketName);
  if (dir.fd < 0) throw Error(fmt::format("cannot open the run directory {}: {}", run_dir, std::strerror(errno)));
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(fmt::format("cannot make a socket: {}", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", dir.path.c_str());
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    throw Error(fmt::format("the run does not answer at {}/{}: {}", run_dir, kControlSocketName, std::strerror(errno)));
  if (!same_user(fd)) throw Error(fmt::format("{}/{} belongs to another user", run_dir, kControlSocketName));
  auto line = request.dump() + "\n";
  if (write_all(fd, line) != 0) throw Error(fmt::format("cannot ask the run: {}", std::strerror(errno)));
  std::string reply;
  char buffer[65536];
  for (;;) {
    auto n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      throw Error(fmt::format("the run did not answer within {} s", timeout_s));
    if (n <= 0) break;
    reply.append(buffer, static_cast<std::size_t>(n));
  }
  try {
    return json::parse(reply);
  } catch (const json::exception&) {
    throw Error("the run closed the connection without an answer (it may have just ended)");
  }
}

}  // namespace sgpu::launcher
