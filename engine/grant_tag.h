// grant_tag: how logs and refusal messages name a write grant without giving it away.
//
// A grant id is a capability (write_grant.h): whoever knows a live one may write its
// room's pages. So no message that can reach a log names the id itself; it names a tag
// instead, "grant tag 1a2b3c4d": 32 bits of a keyed hash (SipHash-2-4) under a key
// drawn at random once per process. The same grant gets the same tag within a process,
// so an operator can tell refusals of one room from another's, but the tag cannot be
// turned back into the id, nor computed by anyone without the process's key. Tags of
// one grant differ between processes (the sender's and the receiver's logs).
//
// Thread safety: grant_tag may be called from any thread (the key is drawn once).
#pragma once

#include <cstdint>
#include <string>

namespace pdkv::engine {

// "grant tag <8 hex digits>", or "no grant" for id 0.
std::string grant_tag(uint64_t grant_id);

}  // namespace pdkv::engine
