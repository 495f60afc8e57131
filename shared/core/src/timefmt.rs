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
    Rendered::of(ms).map_or_else(|| EPOCH.to_owned(), |text| text.as_str().to_owned())
}

/// What a time past year 9999 renders as.
const EPOCH: &str = "1970-01-01T00:00:00.000Z";

/// A timestamp rendered as `YYYY-MM-DDTHH:MM:SS.sssZ` (years 0–9999) on the stack: what an
/// event page writes for every event, without an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rendered([u8; 24]);

thread_local! {
    /// The second rendered last on this thread and its text: the events of a page mostly
    /// share their second, so the calendar arithmetic runs about once per page.
    static LAST_SECOND: std::cell::Cell<Option<(u64, Rendered)>> = const { std::cell::Cell::new(None) };
}

impl Rendered {
    /// `ms` rendered; `None` past year 9999 (see [`rfc3339`]).
    pub fn of(ms: Millis) -> Option<Self> {
        let second = ms / 1000;
        let mut text = match LAST_SECOND.get() {
            Some((last, text)) if last == second => text,
            _ => {
                let text = Self::second_of(second)?;
                LAST_SECOND.set(Some((second, text)));
                text
            }
        };
        put(&mut text.0, 20, 3, (ms % 1000) as u32);
        Some(text)
    }

    /// The text of the whole `second` (fraction `000`).
    fn second_of(second: u64) -> Option<Self> {
        let at = OffsetDateTime::from_unix_timestamp(i64::try_from(second).ok()?).ok()?;
        let year = at.year();
        if !(0..=9999).contains(&year) {
            return None;
        }
        let mut text = *b"0000-00-00T00:00:00.000Z";
        put(&mut text, 0, 4, year as u32);
        put(&mut text, 5, 2, u32::from(u8::from(at.month())));
        put(&mut text, 8, 2, u32::from(at.day()));
        put(&mut text, 11, 2, u32::from(at.hour()));
        put(&mut text, 14, 2, u32::from(at.minute()));
        put(&mut text, 17, 2, u32::from(at.second()));
        Some(Self(text))
    }

    /// The text (always ASCII).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or(EPOCH)
    }
}

/// Writes `value`'s last `width` decimal digits into `text[at..at + width]`.
fn put(text: &mut [u8; 24], at: usize, width: usize, mut value: u32) {
    for position in (at..at + width).rev() {
        text[position] = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::{rfc3339, Rendered};

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

    #[test]
    fn the_cached_second_never_leaks_into_another_time() {
        // Alternating seconds, days and years on one thread: each text is its own time's.
        let times = [1_767_225_600_999u64, 1_767_225_601_000, 1_767_225_600_001, 951_782_400_000, 1_767_225_600_500];
        let texts = [
            "2026-01-01T00:00:00.999Z",
            "2026-01-01T00:00:01.000Z",
            "2026-01-01T00:00:00.001Z",
            "2000-02-29T00:00:00.000Z",
            "2026-01-01T00:00:00.500Z",
        ];
        for _ in 0..2 {
            for (ms, text) in times.iter().zip(texts) {
                assert_eq!(rfc3339(*ms), text);
                assert_eq!(Rendered::of(*ms).unwrap().as_str(), text);
            }
        }
    }

    #[test]
    fn a_time_past_year_9999_renders_as_the_epoch() {
        let ms = 253_402_300_800_000u64; // 10000-01-01T00:00:00Z
        assert!(Rendered::of(ms).is_none());
        assert_eq!(rfc3339(ms), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(ms - 1), "9999-12-31T23:59:59.999Z");
    }
}
