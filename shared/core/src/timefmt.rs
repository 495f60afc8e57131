//! Rendering of the engine's millisecond timestamps as RFC 3339 strings (UTC).
//!
//! Every timestamp the host renders has the same shape, `YYYY-MM-DDTHH:MM:SS.sssZ`: always
//! three fraction digits, so timestamps sort as text in time order. Stores keep times as
//! integer milliseconds and nothing in the host parses a rendered timestamp, so data stored
//! before this width was fixed reads back unchanged.

use time::OffsetDateTime;

/// Milliseconds since the Unix epoch, the only notion of time the engine handles.
pub type Millis = u64;

/// Formats `ms` (milliseconds since the Unix epoch) as an RFC 3339 UTC timestamp with
/// exactly three fraction digits, e.g. `2026-01-01T00:00:00.000Z`. A time past year 9999
/// renders as the epoch (no duration the host accepts gets there).
pub fn rfc3339(ms: Millis) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    let at = OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap_or(OffsetDateTime::UNIX_EPOCH);
    let year = at.year();
    if !(0..=9999).contains(&year) {
        return format!(
            "{year:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            u8::from(at.month()),
            at.day(),
            at.hour(),
            at.minute(),
            at.second(),
            at.millisecond()
        );
    }
    // Every event and snapshot carries timestamps: written digit by digit, without the
    // formatting machinery.
    let mut text = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut value: u32| {
        for position in (at..at + width).rev() {
            text[position] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(0, 4, year as u32);
    put(5, 2, u32::from(u8::from(at.month())));
    put(8, 2, u32::from(at.day()));
    put(11, 2, u32::from(at.hour()));
    put(14, 2, u32::from(at.minute()));
    put(17, 2, u32::from(at.second()));
    put(20, 3, u32::from(at.millisecond()));
    text.iter().map(|byte| char::from(*byte)).collect()
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn formats_milliseconds_in_utc() {
        assert_eq!(rfc3339(1_767_225_600_123), "2026-01-01T00:00:00.123Z");
    }

    #[test]
    fn the_fraction_always_has_three_digits_so_timestamps_sort_as_text() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_767_225_657_190), "2026-01-01T00:00:57.190Z");
        assert_eq!(rfc3339(1_767_225_652_023), "2026-01-01T00:00:52.023Z");
        assert_eq!(rfc3339(1_767_225_600_100), "2026-01-01T00:00:00.100Z");
        let stamps: Vec<u64> = (0..2_000).map(|i| 1_767_225_600_000 + i * 37).collect();
        let rendered: Vec<String> = stamps.iter().map(|ms| rfc3339(*ms)).collect();
        let mut sorted = rendered.clone();
        sorted.sort();
        assert_eq!(sorted, rendered, "text order is time order");
        assert!(rendered.iter().all(|text| text.len() == "2026-01-01T00:00:00.000Z".len()), "{rendered:?}");
    }
}
