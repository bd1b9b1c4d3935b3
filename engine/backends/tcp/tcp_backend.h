// The TCP backend: the default transport, for any IP network.
//
// A TcpPeer is `streams` StreamSenders (tcp_sender.h) to one peer engine; post() plans
// the batch into byte-balanced parts (part_planner.h), one share per stream, and
// completes when every part is ACKed. The TcpReceiver (tcp_receiver.h) serves the
// connections peers open to us. No staging copy on either side: sendmsg() gathers from
// source memory, readv() scatters into destination memory.
//
// Threads: the receiver's acceptor + one per incoming connection; each TcpPeer owns one
// thread per stream. Control calls never wait on data-plane progress except the peer
// destructor, which joins its stream threads.
#pragma once

#include <memory>

#include "engine/backend.h"

namespace pdkv::engine::tcp {

Result<std::unique_ptr<Backend>> make_tcp_backend(const BackendContext& ctx);

}  // namespace pdkv::engine::tcp
