//! Listening sockets. `:PORT` means every interface of both families: an IPv6 socket with
//! `IPV6_V6ONLY` off, which also accepts IPv4 (as `::ffff:a.b.c.d`), so one flag serves
//! IPv4-only, IPv6-only and dual-stack clusters. On a host without IPv6 the same address
//! falls back to `0.0.0.0`.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};

/// What `:PORT` binds: `[::]:PORT`.
pub fn all_interfaces(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port)
}

/// A non-blocking listener on `address`, ready for tokio. `[::]` is dual-stack, and falls
/// back to `0.0.0.0` on the same port when the host has no IPv6.
pub fn listen(address: SocketAddr) -> io::Result<std::net::TcpListener> {
    listen_with(address, open)
}

/// [`listen`] with the socket opener given, so the IPv4-only fallback can be exercised on a
/// host that has IPv6.
fn listen_with(
    address: SocketAddr,
    open: impl Fn(SocketAddr) -> io::Result<std::net::TcpListener>,
) -> io::Result<std::net::TcpListener> {
    match open(address) {
        Err(e) if address.ip() == IpAddr::V6(Ipv6Addr::UNSPECIFIED) && no_ipv6(&e) => {
            let fallback = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), address.port());
            tracing::info!(%address, %fallback, error = %e, "no IPv6 on this host; listening on IPv4 only");
            open(fallback)
        }
        other => other,
    }
}

fn open(address: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    if address.is_ipv6() && address.ip().is_unspecified() {
        socket.set_only_v6(false)?;
    }
    // As std and tokio do on Unix: a restarted process can bind while old connections linger.
    #[cfg(unix)]
    socket.set_reuse_address(true)?;
    socket.bind(&address.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Whether an error means the host has no IPv6 (the family is unsupported, or no address
/// of it can be bound).
fn no_ipv6(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(EAFNOSUPPORT | EADDRNOTAVAIL))
        || e.kind() == io::ErrorKind::AddrNotAvailable
}

// errno values (Linux, then the BSDs and macOS), named without a libc dependency.
#[cfg(target_os = "linux")]
const EAFNOSUPPORT: i32 = 97;
#[cfg(target_os = "linux")]
const EADDRNOTAVAIL: i32 = 99;
#[cfg(not(target_os = "linux"))]
const EAFNOSUPPORT: i32 = 47;
#[cfg(not(target_os = "linux"))]
const EADDRNOTAVAIL: i32 = 49;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// `:PORT` answers on IPv4 and IPv6 loopback alike.
    #[test]
    fn all_interfaces_is_dual_stack() {
        let listener = listen(all_interfaces(0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(false).unwrap();
        for client in ["127.0.0.1", "::1"] {
            let ip: IpAddr = client.parse().unwrap();
            std::net::TcpStream::connect(SocketAddr::new(ip, port))
                .unwrap_or_else(|e| panic!("{client}: {e}"));
            let (_, from) = listener.accept().unwrap();
            assert_eq!(
                from.ip().to_canonical(),
                ip,
                "accepted from {client} as {from}"
            );
        }
    }

    /// An IPv4-only host: opening an IPv6 socket fails as the kernel says when the family
    /// is missing (or has no address); `:PORT` then listens on `0.0.0.0` and answers IPv4.
    #[test]
    fn all_interfaces_falls_back_to_ipv4_without_ipv6() {
        for errno in [EAFNOSUPPORT, EADDRNOTAVAIL] {
            let ipv4_only = |address: SocketAddr| {
                if address.is_ipv6() {
                    Err(io::Error::from_raw_os_error(errno))
                } else {
                    open(address)
                }
            };
            let listener = listen_with(all_interfaces(0), ipv4_only).unwrap();
            let bound = listener.local_addr().unwrap();
            assert_eq!(
                bound.ip(),
                IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                "errno {errno}"
            );
            std::net::TcpStream::connect(SocketAddr::new(
                "127.0.0.1".parse().unwrap(),
                bound.port(),
            ))
            .unwrap();
        }
        // Any other failure is the caller's to see (a port in use is not a missing family),
        // and a specific IPv6 address never falls back.
        let in_use = |_: SocketAddr| Err(io::Error::from(io::ErrorKind::AddrInUse));
        assert_eq!(
            listen_with(all_interfaces(0), in_use).unwrap_err().kind(),
            io::ErrorKind::AddrInUse
        );
        let missing = |_: SocketAddr| Err(io::Error::from_raw_os_error(EAFNOSUPPORT));
        assert!(listen_with("[::1]:0".parse().unwrap(), missing).is_err());
    }

    #[test]
    fn a_specific_address_binds_only_itself() {
        let listener = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(
            std::net::TcpStream::connect(SocketAddr::new("::1".parse().unwrap(), port)).is_err()
        );
    }
}
