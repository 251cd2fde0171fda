// Stopping a training run on a signal: SIGINT (Ctrl-C), SIGTERM (kill, a
// job scheduler) and SIGHUP (the terminal closed) while training let the
// current step finish; the checkpoint is written, the program says where and
// exits with 128 + the signal's number. A second signal ends the program at
// once (its default action). Used by trainer/run.cpp.
#pragma once

namespace qkv::train {

// Installs (on) or removes (off) the handler for the three signals.
void catch_stop_signals(bool on);
// SIGPIPE ignored from now on: a reader of stdout that went away (`train |
// head`) would otherwise end the run, unsaved, at its next line; instead its
// printed lines are lost and the run goes on to its checkpoint (run() calls
// it first).
void ignore_broken_pipe();
// Whether to stop now. Under MPI the ranks agree (any rank's signal stops
// them all after the same step), so no rank waits in a collective for one
// that left. Collective under MPI: every rank calls it at the same step.
bool stop_requested();
// The signal received (0: none).
int stop_signal();
// "SIGINT", "SIGHUP" or "SIGTERM".
const char* signal_name(int sig);

}  // namespace qkv::train
