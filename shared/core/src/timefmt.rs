//! Rendering of the engine's millisecond timestamps as RFC 3339 strings (UTC).

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Milliseconds since the Unix epoch, the only notion of time the engine handles.
pub type Millis = u64;

/// Formats `ms` (milliseconds since the Unix epoch) as an RFC 3339 UTC timestamp with
/// millisecond precision, e.g. `2026-01-01T00:00:00.000Z`.
pub fn rfc3339(ms: Millis) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    let at = OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap_or(OffsetDateTime::UNIX_EPOCH);
    let at = at.replace_nanosecond((ms % 1000) as u32 * 1_000_000).unwrap_or(at);
    at.format(&Rfc3339).unwrap_or_else(|_| "1970-01-01T00:00:00.000Z".to_owned())
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn formats_milliseconds_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_767_225_600_123), "2026-01-01T00:00:00.123Z");
    }
}
