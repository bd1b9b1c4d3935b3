// Settings of the route registry (RegistryOptions::from), and the etcd binary its tests start.
//
// Each spec is the one place its setting's name, default, range and help text are written
// (common/setting_spec.h); docs/CONFIG.md's rows are generated from it.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/setting_spec.h"

namespace pdkv::kv {

inline constexpr std::string_view kRegistryKinds[] = {"http", "etcd"};

inline constexpr config::SettingSpec kRegistry =
    config::string_setting("PDKV_REGISTRY", "http", kRegistryKinds)
        .described(
            "`http`: the bootstrap server at the bootstrap address (`pdkv bootstrap`), zero "
            "dependencies. `etcd`: routes live in etcd under a lease per prefill rank; they survive"
            " any one host, vanish `PDKV_ETCD_LEASE_TTL_S` after a rank dies, and decodes learn of "
            "them by a watch, not by polling: a decode drops a vanished (or moved) rank's cached "
            "route, so later rooms resolve it again, and fails the rooms still bootstrapping with "
            "it at once (cause `bootstrap_failed`, the reason naming the rank and its key in etcd);"
            " rooms whose pre-allocation it already holds are left to it and to liveness");

inline constexpr config::SettingSpec kEtcdEndpoints =
    config::string_setting("PDKV_ETCD_ENDPOINTS", "127.0.0.1:2379")
        .shown_range(
            "comma list of host:port (IPv6 as `[addr]:port`; an `http://` prefix is accepted)")
        .described(
            "the etcd members (3.4+, JSON gateway on the client port); every call fails over to the"
            " next member on a transport error, a 5xx or a member without leader");

inline constexpr config::SettingSpec kEtcdPrefix =
    config::string_setting("PDKV_ETCD_PREFIX", "/pdkv")
        .shown_range("starts with `/`, no trailing `/`, at most 256 bytes")
        .described(
            "key prefix, so several pdkv clusters share one etcd: rank entries are "
            "`<prefix>/instances/<instance>/ranks/<engine_rank>`");

inline constexpr config::SettingSpec kEtcdLeaseTtlS =
    config::int_setting("PDKV_ETCD_LEASE_TTL_S", 10, 2, 3600)
        .described(
            "lease of a prefill rank's entries, renewed every third of it: a killed rank's route is"
            " gone this long after its death (a clean shutdown revokes it at once); a shorter TTL "
            "finds dead ranks sooner but an etcd outage longer than it makes every rank register "
            "again. With each renewal the rank also reads its entries back and puts back any that "
            "someone else rewrote or deleted, so a rewritten route is restored within a third of "
            "the TTL (docs/SECURITY.md)");

// etcd's own access control, as etcd is run in production: client TLS (the members'
// CA, and a client certificate where etcd asks for one) and a user whose password is
// read from a file (docs/SECURITY.md).
inline constexpr config::SettingSpec kEtcdCaFile =
    config::string_setting("PDKV_ETCD_CA_FILE", "")
        .shown_default("none (plain HTTP)")
        .shown_range("path of a PEM file")
        .described(
            "the CA that signed the etcd members' certificates: set, every endpoint is reached "
            "over TLS and its certificate must verify against it (and name the endpoint's host)");

inline constexpr config::SettingSpec kEtcdCertFile =
    config::string_setting("PDKV_ETCD_CERT_FILE", "")
        .shown_default("none")
        .shown_range("path of a PEM file")
        .described(
            "client certificate shown to etcd (`--client-cert-auth`); needs `PDKV_ETCD_KEY_FILE`"
            " and `PDKV_ETCD_CA_FILE`");

inline constexpr config::SettingSpec kEtcdKeyFile =
    config::string_setting("PDKV_ETCD_KEY_FILE", "")
        .shown_default("none")
        .shown_range("path of a PEM file")
        .described("private key of `PDKV_ETCD_CERT_FILE`");

inline constexpr config::SettingSpec kEtcdUser =
    config::string_setting("PDKV_ETCD_USER", "")
        .shown_default("none (no etcd authentication)")
        .shown_range("an etcd user name, at most 256 bytes")
        .described(
            "etcd user pdkv authenticates as (etcd `auth enable`); needs "
            "`PDKV_ETCD_PASSWORD_FILE`. The token etcd hands out is sent with every request and "
            "fetched again when etcd says it expired");

inline constexpr config::SettingSpec kEtcdPasswordFile =
    config::string_setting("PDKV_ETCD_PASSWORD_FILE", "")
        .shown_default("none")
        .shown_range("path of a regular file, mode 600, at most 4096 bytes")
        .described(
            "the password of `PDKV_ETCD_USER`: the file's bytes without a trailing line end "
            "(never an environment variable, which other processes of the user may read)");

inline constexpr config::SettingSpec kEtcdBin =
    config::string_setting("PDKV_ETCD_BIN", "/usr/bin/etcd")
        .process_wide()
        .shown_range("path of an executable")
        .described(
            "tests and benchmarks only (`pdkv.testing.etcd`, `kv/registry/testing/`): the etcd "
            "server they start; tests skip when it is absent");

}  // namespace pdkv::kv
