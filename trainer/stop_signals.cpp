#include "trainer/stop_signals.h"

#include <csignal>

#include "dist/distributed.h"

namespace qkv::train {

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {  // the second one: as if no handler were installed
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_stop_signal = sig;
}

}  // namespace

int stop_signal() { return g_stop_signal; }

void catch_stop_signals(bool on) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction sa {};
    sa.sa_handler = on ? on_stop_signal : SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

void ignore_broken_pipe() { std::signal(SIGPIPE, SIG_IGN); }

bool stop_requested() {
  if (dist::size() == 1) return g_stop_signal != 0;
  const double any = dist::sum(g_stop_signal != 0 ? 1.0 : 0.0);
  if (any > 0 && g_stop_signal == 0) g_stop_signal = SIGTERM;  // another rank's
  return any > 0;
}

const char* signal_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM";
}

}  // namespace qkv::train
