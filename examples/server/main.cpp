// frugal_server: the example server (server.hpp) behind a real HTTP listener.
//
//   frugal_server --model DIR [--host 127.0.0.1] [--port 8080] [--precision int8|fp32|fp16|bf16|int4]
//                 [--calibration FILE] [--max-batch N] [--max-batch-tokens N] [--window-ms X]
//                 [--max-queued N] [--max-body-bytes N] [--cache-entries N] [--http-threads N]
//                 [--http-nice N]  (HTTP threads' nice value 0 .. 19, default 0; 19: the model first)
//                 [--model-threads N] [--token-file FILE] [--export-dir DIR] [--hourly-usd X]
//                 [--redis HOST:PORT]  (a shared result tier for replicas; password from
//                 FRUGAL_REDIS_PASSWORD)
//                 [--semantic] [--semantic-threshold X] [--semantic-entries N] [--semantic-model-ms X]
//                 [--semantic-gpu-usd X]  (POST /v1/semantic/answer, see semantic_route.hpp)
//                 [--models FILE]  (several models from one pool, loaded on demand and unloaded when
//                 idle, within a memory budget: see models_config.hpp; --model DIR is their default path)
//                 [--pool-collect-s X]  (how often idle models are unloaded, default 1)
//                 [--drain-grace-s X]  (after SIGTERM, how long running generations may go on, default 30)
//                 [--check-config]  (check the flags, --models FILE and --export-dir, then exit 0)
//
// The bearer token is read from --token-file or the environment variable FRUGAL_SERVER_TOKEN, never
// from the command line (it would show in ps) and never logged. SIGTERM or SIGINT stops accepting,
// answers every accepted request, writes the ledger's exports to --export-dir, and exits 0 (1 when an
// export cannot be written, naming it); a second signal exits 1 at once. An --export-dir that cannot be
// written is refused at start.
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "../common/flags.hpp"
#include "../common/lines.hpp"
#include "../common/write.hpp"
#include "server.hpp"

#ifndef FRUGAL_DEFAULT_CALIBRATION
#  define FRUGAL_DEFAULT_CALIBRATION ""
#endif
#ifndef FRUGAL_DEFAULT_MODEL_DIR
#  define FRUGAL_DEFAULT_MODEL_DIR ""
#endif

int main(int argc, char** argv) {
  server::options o;
  o.calibration = FRUGAL_DEFAULT_CALIBRATION;
  if (const char* e = std::getenv("FRUGAL_MODEL_DIR"); e && *e)
    o.model_dir = e;
  else
    o.model_dir = FRUGAL_DEFAULT_MODEL_DIR;
  if (const char* t = std::getenv("FRUGAL_SERVER_TOKEN"); t && *t) o.token = t;
  std::string models_file;
  int http_nice = 0;
  bool check_only = false;
  try {
    examples::flags f(argc, argv);
    while (f.next()) {
      if (f.is("--model"))
        o.model_dir = f.value();
      else if (f.is("--models"))
        models_file = f.value();
      else if (f.is("--check-config"))
        check_only = true;
      else if (f.is("--pool-collect-s"))
        o.collect_interval_s = f.number(0.01, 3600);
      else if (f.is("--drain-grace-s"))
        o.drain_grace_s = f.number(0, 3600);
      else if (f.is("--model-name"))
        o.model_name = f.value();
      else if (f.is("--host"))
        o.host = f.value();
      else if (f.is("--port"))
        o.port = static_cast<int>(f.integer(0, 65535));
      else if (f.is("--precision"))
        o.precision = f.value();
      else if (f.is("--calibration"))
        o.calibration = f.value();
      else if (f.is("--max-batch"))
        o.max_batch = f.integer(1, 4096);
      else if (f.is("--max-batch-tokens"))
        o.max_batch_tokens = f.integer(256, 1 << 24);
      else if (f.is("--window-ms"))
        o.window_ms = f.number(0, 10000);
      else if (f.is("--max-queued"))
        o.max_queued = f.integer(1, 1 << 24);
      else if (f.is("--max-body-bytes"))
        o.max_body_bytes = f.integer(64, 1ull << 30);
      else if (f.is("--max-inputs"))
        o.max_inputs = f.integer(1, 65536);
      else if (f.is("--cache-entries"))
        o.cache_entries = f.integer(0, 1ull << 30);
      else if (f.is("--http-threads"))
        o.http_threads = static_cast<int>(f.integer(1, 4096));
      else if (f.is("--http-nice"))
        http_nice = static_cast<int>(f.integer(0, 19));
      else if (f.is("--model-threads"))
        o.model_threads = f.integer(1, 256);
      else if (f.is("--request-timeout-s"))
        o.request_timeout_s = static_cast<double>(f.integer(1, 3600));
      else if (f.is("--export-dir"))
        o.export_dir = f.value();
      else if (f.is("--redis")) {
        o.redis = f.value();
        const auto colon = o.redis.rfind(':');
        if (colon == std::string::npos || colon == 0)
          throw examples::usage_error("--redis must be HOST:PORT, not \"" + o.redis + "\"");
        (void)examples::integer_flag("--redis's port", o.redis.substr(colon + 1), 1, 65535);
      } else if (server::semantic_flag(o.semantic, f)) {
      } else if (f.is("--hourly-usd"))
        o.hourly_usd = f.value();
      else if (f.is("--token-file")) {
        const std::string path = f.value();
        const auto lines = examples::read_lines(path, "--token-file", 1);
        if (lines.empty() || lines[0].empty())
          throw examples::usage_error("--token-file " + path + ": is empty");
        o.token = lines[0];
      } else if (f.is("--help") || f.is("-h")) {
        std::printf(
            "usage: %s --model DIR [--host H] [--port N] [--precision P] [--max-batch N] [--max-queued N] "
            "[--cache-entries N] [--token-file FILE] [--export-dir DIR] ... (see the top of main.cpp)\n",
            argv[0]);
        return 0;
      } else {
        f.unknown();
      }
    }
    (void)examples::encoder_precision(o.precision, "--precision");
    try {  // the ledger's price: named by its flag, not by the money parser or the ledger
      if (frugal::cost::money::parse(o.hourly_usd).nanos() <= 0)
        throw std::invalid_argument("must be a price > 0, not \"" + o.hourly_usd + "\"");
    } catch (const std::invalid_argument& e) {
      throw examples::usage_error(std::string("--hourly-usd: ") + e.what());
    }
    // The whole model config is checked here, before any work: every field, with its path.
    if (!models_file.empty())
      o.models = server::load_models_config(models_file, o.model_dir);
    else if (o.model_dir.empty())
      throw examples::usage_error("--model DIR (or --models FILE) is required");
    // The ledger's exports are written at shutdown: a directory they cannot go to is refused now.
    if (!o.export_dir.empty()) try {
        examples::prepare_output_dir(o.export_dir);
      } catch (const examples::write_error& e) {
        throw examples::usage_error(std::string("--export-dir: ") + e.what());
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "frugal_server: %s (see --help)\n", e.what());
    return 2;
  }
  if (check_only) {
    std::printf("frugal_server: the flags%s are valid\n",
                models_file.empty() ? "" : (" and --models " + models_file).c_str());
    return 0;
  }

  // Every thread started from here on inherits the blocked signals; one thread waits for them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  try {
    server::app app(o);
    app.load();
    httplib::Server http;
    const int threads = o.http_threads;
    http.new_task_queue = [threads, http_nice] {
      return new server::nice_pool(static_cast<std::size_t>(threads), http_nice);
    };
    app.routes(http);
    // Debian's cpp-httplib is a shared library that listens with a backlog of 5, fixed when it was built.
    // Under load that dropped handshakes (the overload test at -c 512: 2,944 listen drops in 20 s), and a
    // client whose handshake was dropped resent its request with exponential backoff, for seconds. Linux
    // lets a second listen() change the backlog, so the listening socket is kept and listened on again.
    socket_t listener = INVALID_SOCKET;
    http.set_socket_options([&listener](socket_t s) {
      httplib::default_socket_options(s);
      listener = s;
    });
    int port = o.port;
    if (port == 0)
      port = http.bind_to_any_port(o.host);
    else if (!http.bind_to_port(o.host, port))
      port = -1;
    if (port < 0) throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(o.port));
    constexpr int listen_backlog = 1024;  // the kernel caps it at net.core.somaxconn
    if (listener == INVALID_SOCKET || ::listen(listener, listen_backlog) != 0)
      throw std::runtime_error("cannot widen the listen backlog of " + o.host + ":" + std::to_string(port) +
                               ": " + std::strerror(errno));
    // A signal can come before listen_after_bind() has started, when httplib's stop() does nothing: stop it
    // again until the listen loop has returned.
    std::atomic<bool> listen_returned{false};
    std::thread signals([&] {
      int sig = 0;
      sigwait(&sigs, &sig);
      std::fprintf(stderr, "frugal_server: signal %d: draining\n", sig);
      app.begin_drain();
      while (!listen_returned.load()) {
        http.stop();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      sigwait(&sigs, &sig);
      std::fprintf(stderr, "frugal_server: second signal %d: exiting now\n", sig);
      std::_Exit(1);
    });
    signals.detach();
    std::printf("listening on %s:%d\n", o.host.c_str(), port);
    std::fflush(stdout);
    const bool ok = http.listen_after_bind();
    listen_returned.store(true);
    app.drain();
    std::fprintf(stderr, "frugal_server: stopped; %llu requests accepted, %llu answered\n",
                 static_cast<unsigned long long>(app.accepted()),
                 static_cast<unsigned long long>(app.answered()));
    return ok || app.accepted() == app.answered() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "frugal_server: %s\n", e.what());
    return 1;
  }
}
