//! The outbound address policy (the SSRF guard): which IP addresses the HTTP client may
//! connect to.
//!
//! Public unicast addresses are allowed. Blocked unless an [`AllowList`] entry covers them:
//! loopback (127/8, `::1`), private (10/8, 172.16/12, 192.168/16), link-local (169.254/16,
//! `fe80::/10`), unique-local (`fc00::/7`), "this network" (0/8), shared/CGNAT (100.64/10) and
//! the reserved, benchmarking and documentation ranges. Never allowed, whatever the
//! allow-list says: the cloud metadata and credential endpoints ([`METADATA`]), the
//! unspecified addresses, multicast and broadcast. An IPv6 address that embeds an IPv4 one
//! (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4
//! `2002::/16`) is judged as that IPv4 address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::IpNet;

/// Addresses that can never be allowed: instance metadata (AWS, GCP, Azure, OpenStack:
/// 169.254.169.254; AWS IPv6 `fd00:ec2::254`; Alibaba 100.100.100.200) and the container
/// credential endpoints (ECS 169.254.170.2; EKS Pod Identity 169.254.170.23 and `fd00:ec2::23`).
pub const METADATA: &[IpAddr] = &[
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 170, 2)),
    IpAddr::V4(Ipv4Addr::new(169, 254, 170, 23)),
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x254)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x23)),
];

/// Why an address is refused (its `as_str` is the `reason` of `http_url_rejected`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockReason {
    /// A cloud metadata or credential endpoint ([`METADATA`]); never allowed.
    Metadata,
    /// 127/8, `::1`.
    Loopback,
    /// RFC 1918: 10/8, 172.16/12, 192.168/16.
    Private,
    /// 169.254/16, `fe80::/10`.
    LinkLocal,
    /// `fc00::/7`.
    UniqueLocal,
    /// 0/8 ("this network"; 0.0.0.0 itself is [`BlockReason::Unspecified`]).
    ThisNetwork,
    /// 100.64/10 (CGNAT, RFC 6598).
    SharedAddress,
    /// 0.0.0.0, `::`; never allowed.
    Unspecified,
    /// 224/4, `ff00::/8`; never allowed.
    Multicast,
    /// 255.255.255.255; never allowed.
    Broadcast,
    /// Reserved, benchmarking, documentation and protocol-assignment ranges (240/4,
    /// 198.18/15, 192.0.0/24, 192.0.2/24, 198.51.100/24, 203.0.113/24, `2001:db8::/32`,
    /// `100::/64`, other IPv4-compatible forms).
    Reserved,
}

impl BlockReason {
    /// The stable reason text (`loopback`, `private`, `link-local`, `metadata`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Metadata => "metadata",
            Self::Loopback => "loopback",
            Self::Private => "private",
            Self::LinkLocal => "link-local",
            Self::UniqueLocal => "unique-local",
            Self::ThisNetwork => "this-network",
            Self::SharedAddress => "shared-address",
            Self::Unspecified => "unspecified",
            Self::Multicast => "multicast",
            Self::Broadcast => "broadcast",
            Self::Reserved => "reserved",
        }
    }

    /// Whether an allow-list entry can lift the block.
    pub fn allowable(self) -> bool {
        !matches!(self, Self::Metadata | Self::Unspecified | Self::Multicast | Self::Broadcast)
    }
}

impl fmt::Display for BlockReason {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// `ip` with an embedded IPv4 address unwrapped (see the module docs).
pub fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else { return ip };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let segments = v6.segments();
    let octets = v6.octets();
    let embedded = |at: usize| IpAddr::V4(Ipv4Addr::new(octets[at], octets[at + 1], octets[at + 2], octets[at + 3]));
    // IPv4-compatible (deprecated) ::a.b.c.d, but not :: and ::1 themselves.
    if segments[..6] == [0; 6] && segments[6] != 0 {
        return embedded(12);
    }
    // NAT64 well-known prefix 64:ff9b::/96.
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return embedded(12);
    }
    // 6to4 2002:AABB:CCDD::/48.
    if segments[0] == 0x2002 {
        return embedded(2);
    }
    ip
}

/// Why `ip` is blocked before any allow-list, or `None` for a public address.
pub fn classify(ip: IpAddr) -> Option<BlockReason> {
    let ip = canonical(ip);
    if METADATA.contains(&ip) {
        return Some(BlockReason::Metadata);
    }
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<BlockReason> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        _ if ip.is_unspecified() => BlockReason::Unspecified,
        _ if ip.is_broadcast() => BlockReason::Broadcast,
        (0, _, _) => BlockReason::ThisNetwork,
        (127, _, _) => BlockReason::Loopback,
        (10, _, _) => BlockReason::Private,
        (172, 16..=31, _) => BlockReason::Private,
        (192, 168, _) => BlockReason::Private,
        (169, 254, _) => BlockReason::LinkLocal,
        (100, 64..=127, _) => BlockReason::SharedAddress,
        (224..=239, _, _) => BlockReason::Multicast,
        (240..=255, _, _) => BlockReason::Reserved,
        (198, 18..=19, _) | (192, 0, 0) | (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => BlockReason::Reserved,
        _ => return None,
    })
}

fn classify_v6(ip: Ipv6Addr) -> Option<BlockReason> {
    let segments = ip.segments();
    Some(match segments[0] {
        _ if ip.is_unspecified() => BlockReason::Unspecified,
        _ if ip.is_loopback() => BlockReason::Loopback,
        0xff00..=0xffff => BlockReason::Multicast,
        0xfe80..=0xfebf => BlockReason::LinkLocal,
        0xfc00..=0xfdff => BlockReason::UniqueLocal,
        0x2001 if segments[1] == 0x0db8 => BlockReason::Reserved,
        0x0100 if segments[1..4] == [0, 0, 0] => BlockReason::Reserved,
        // Site-local (deprecated) fec0::/10 and anything else in ::/8 not handled above.
        0xfec0..=0xfeff | 0x0000..=0x00ff => BlockReason::Reserved,
        _ => return None,
    })
}

/// The networks an operator allows despite their category (`TRELLIS_HTTP_ALLOW_PRIVATE_NETS`
/// / `--http-allow-private-nets`, e.g. `10.0.0.0/8,127.0.0.1`). Empty by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    nets: Vec<IpNet>,
}

/// An allow-list entry that is neither an IP address nor a CIDR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allow-list entry `{entry}` is not an IP address or CIDR (e.g. 10.0.0.0/8, 127.0.0.1, fd12::/16)")]
pub struct AllowListError {
    /// The bad entry, as written.
    pub entry: String,
}

impl AllowList {
    /// Nothing allowed beyond public addresses.
    pub fn none() -> Self {
        Self::default()
    }

    /// Parses a comma-separated list of IPs and CIDRs (blank entries are ignored).
    pub fn parse(list: &str) -> Result<Self, AllowListError> {
        let nets = list
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                IpNet::from_str(entry)
                    .or_else(|_| IpAddr::from_str(entry).map(IpNet::from))
                    .map(|net| match net {
                        // An IPv4-mapped IPv6 entry covers the IPv4 addresses checks see.
                        IpNet::V6(v6) if v6.addr().to_ipv4_mapped().is_some() && v6.prefix_len() >= 96 => {
                            let v4 = v6.addr().to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED);
                            ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).map(IpNet::V4).unwrap_or(net)
                        }
                        other => other,
                    })
                    .map_err(|_| AllowListError { entry: entry.to_owned() })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { nets })
    }

    /// The networks, as parsed.
    pub fn nets(&self) -> &[IpNet] {
        &self.nets
    }

    /// Whether an entry covers `ip` (after [`canonical`]).
    pub fn covers(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.nets.iter().any(|net| net.contains(&ip))
    }

    /// Whether the client may connect to `ip`: `Ok` for a public or allow-listed address,
    /// otherwise why not.
    pub fn check(&self, ip: IpAddr) -> Result<(), BlockReason> {
        match classify(ip) {
            None => Ok(()),
            Some(reason) if reason.allowable() && self.covers(ip) => Ok(()),
            Some(reason) => Err(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn categories_are_blocked_with_their_reason() {
        let none = AllowList::none();
        for (address, reason) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("::1", "loopback"),
            ("10.0.0.5", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.10.10", "link-local"),
            ("fe80::1", "link-local"),
            ("fd12::1", "unique-local"),
            ("fc00::1", "unique-local"),
            ("169.254.169.254", "metadata"),
            ("169.254.170.2", "metadata"),
            ("fd00:ec2::254", "metadata"),
            ("0.1.2.3", "this-network"),
            ("100.64.0.1", "shared-address"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("ff02::1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("240.0.0.1", "reserved"),
            ("192.0.2.1", "reserved"),
            ("2001:db8::1", "reserved"),
            ("::ffff:10.0.0.1", "private"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "metadata"),
            ("::10.0.0.1", "private"),
            ("64:ff9b::a00:1", "private"),
            ("2002:a9fe:a9fe::1", "metadata"),
        ] {
            assert_eq!(none.check(ip(address)).map_err(BlockReason::as_str), Err(reason), "{address}");
        }
    }

    #[test]
    fn public_addresses_are_allowed() {
        let none = AllowList::none();
        for address in ["93.184.216.34", "8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:2800:220:1::1", "::ffff:8.8.8.8"]
        {
            assert_eq!(none.check(ip(address)), Ok(()), "{address}");
        }
    }

    #[test]
    fn the_allow_list_lifts_categories_but_never_metadata() {
        let allow =
            AllowList::parse(" 10.0.0.0/8, 127.0.0.1 ,169.254.0.0/16,fd00::/8,,::ffff:192.168.0.0/112").unwrap();
        assert_eq!(allow.nets().len(), 5);
        assert_eq!(allow.check(ip("10.1.2.3")), Ok(()));
        assert_eq!(allow.check(ip("::ffff:10.1.2.3")), Ok(()));
        assert_eq!(allow.check(ip("127.0.0.1")), Ok(()));
        assert_eq!(allow.check(ip("127.0.0.2")), Err(BlockReason::Loopback));
        assert_eq!(allow.check(ip("169.254.10.10")), Ok(()));
        assert_eq!(allow.check(ip("192.168.3.4")), Ok(()));
        assert_eq!(allow.check(ip("169.254.169.254")), Err(BlockReason::Metadata));
        assert_eq!(allow.check(ip("169.254.170.2")), Err(BlockReason::Metadata));
        assert_eq!(allow.check(ip("fd00:ec2::254")), Err(BlockReason::Metadata));
        assert_eq!(allow.check(ip("fd12::1")), Ok(()));
        assert_eq!(allow.check(ip("fc00::1")), Err(BlockReason::UniqueLocal));

        let everything = AllowList::parse("0.0.0.0/0,::/0").unwrap();
        assert_eq!(everything.check(ip("0.0.0.0")), Err(BlockReason::Unspecified));
        assert_eq!(everything.check(ip("224.0.0.1")), Err(BlockReason::Multicast));
        assert_eq!(everything.check(ip("::ffff:169.254.169.254")), Err(BlockReason::Metadata));
        assert_eq!(everything.check(ip("192.168.1.1")), Ok(()));
    }

    #[test]
    fn a_bad_entry_is_named() {
        let error = AllowList::parse("10.0.0.0/8, example.com ,127.0.0.1").unwrap_err();
        assert_eq!(error.entry, "example.com");
        assert!(error.to_string().contains("`example.com`"));
        assert!(AllowList::parse("10.0.0.0/33").is_err());
        assert_eq!(AllowList::parse("").unwrap(), AllowList::none());
    }
}
