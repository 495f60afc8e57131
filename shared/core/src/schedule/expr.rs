//! Schedule expressions in Amazon EventBridge Scheduler syntax, evaluated in an IANA time zone.
//!
//! [`ScheduleExpr::parse`] reads one of three forms:
//!
//! - `rate(value unit)`: every `value` units, `value` a positive integer and `unit` one of
//!   `minute`, `minutes`, `hour`, `hours`, `day`, `days` (singular or plural whatever the
//!   value; EventBridge wants the singular for 1). A rate is a fixed duration — a day is 24
//!   hours, across a daylight saving change too, as in EventBridge — and the schedule ticks at
//!   `anchor + k·period`, `k ≥ 1`, `anchor` being when it was created. `second`/`seconds`
//!   (1–59 only) is also read, for test seams: [`ScheduleExpr::is_sub_minute`] tells the
//!   caller, which refuses it elsewhere (EventBridge's minimum period is one minute).
//! - `cron(minutes hours day-of-month month day-of-week year)`: exactly six fields, in the
//!   schedule's time zone:
//!
//!   | field        | values                       | wildcards                   |
//!   |--------------|------------------------------|-----------------------------|
//!   | minutes      | 0-59                         | `, - * /`                   |
//!   | hours        | 0-23                         | `, - * /`                   |
//!   | day-of-month | 1-31                         | `, - * / ?`, `L`, `LW`, `nW` |
//!   | month        | 1-12 or JAN-DEC              | `, - * /`                   |
//!   | day-of-week  | 1-7 or SUN-SAT (1 = Sunday)  | `, - * ?`, `L`, `nL`, `n#k` |
//!   | year         | 1970-2199                    | `, - * /`                   |
//!
//!   `a/s` is `a`, `a+s`, … up to the field's maximum, `*/s` the same from its minimum and
//!   `a-b/s` the same within `a-b`. A range whose start is after its end wraps around
//!   (`FRI-MON`, `22-2`), except in years, where it is refused. Exactly one of day-of-month
//!   and day-of-week is `?`: the other names the days (`*` included). In day-of-month `L` is
//!   the last day of the month, `LW` its last weekday (Monday–Friday) and `15W` the weekday
//!   nearest the 15th within the month (a Saturday 15th gives Friday 14th, a Sunday Monday
//!   16th; a Saturday 1st gives Monday 3rd, a Sunday last day the Friday before it); a month
//!   without that day has no occurrence. In day-of-week `L` alone is Saturday, the last day
//!   of the week, `6L` the last Friday of the month and `3#2` its second Tuesday (`k` 1-5; a
//!   month without a fifth one has none). These stand alone in their field: no lists, no
//!   ranges, no `L-n` offsets (EventBridge allows one expression with `#`). Day-of-week takes
//!   no increments (EventBridge lists no `/` for it). Month and day names, `L` and `W` are
//!   case-insensitive.
//! - `at(yyyy-mm-ddThh:mm:ss)`: once, at that local time in the schedule's time zone.
//!
//! # Time zones and daylight saving time
//!
//! The time zone is an IANA name (`Europe/Berlin`), UTC when none is given, looked up in the
//! tz database compiled into the binary (Lambda has no `/usr/share/zoneinfo`). Cron fields
//! name local times, and a transition is handled as EventBridge Scheduler documents it:
//!
//! - a local time skipped when clocks go forward does not occur (`cron(30 2 * * ? *)` in
//!   Europe/Berlin does not fire on the last Sunday of March);
//! - a local time repeated when clocks go back fires once, at its first instant.
//!
//! A one-time `at` in a skipped time fires when the gap ends (the first instant after it), so
//! it is not lost; in a repeated time it fires at the first instant.
//!
//! # Bounds
//!
//! [`ScheduleExpr::next_after`] searches field by field (the next matching year, month, day,
//! hour, then minute), never minute by minute, and stops after the year 2199, the last one a
//! cron expression can name: an expression that can never match (`cron(0 0 30 2 ? *)`) or
//! whose years are over answers `None`.

use jiff::civil::{Date, DateTime};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::Timestamp;

use crate::timefmt::Millis;

/// A parsed schedule expression and the time zone it is evaluated in.
#[derive(Debug, Clone)]
pub struct ScheduleExpr {
    kind: Kind,
    zone: TimeZone,
}

/// The three forms of expression.
#[derive(Debug, Clone)]
enum Kind {
    /// `rate(…)`: the period, in milliseconds.
    Rate(u64),
    /// `cron(…)` (boxed: its field sets are the bulk of the value).
    Cron(Box<Cron>),
    /// `at(…)`: the instant, in milliseconds since the Unix epoch (negative before it).
    At(i64),
}

impl ScheduleExpr {
    /// Parses `rate(…)`, `cron(…)` or `at(…)` in EventBridge Scheduler syntax (see the
    /// [module docs](self)) with an IANA time zone (`None` = UTC). Errors are human text
    /// naming the rule broken, e.g. "cron(...) needs 6 fields (minutes hours day-of-month
    /// month day-of-week year), found 5".
    pub fn parse(expression: &str, timezone: Option<&str>) -> Result<Self, String> {
        let zone = time_zone(timezone)?;
        let text = expression.trim();
        let kind = if let Some(body) = arguments(text, "rate")? {
            Kind::Rate(parse_rate(body)?)
        } else if let Some(body) = arguments(text, "cron")? {
            Kind::Cron(Box::new(parse_cron(body)?))
        } else if let Some(body) = arguments(text, "at")? {
            Kind::At(parse_at(body, &zone)?)
        } else {
            return Err(format!(
                "a schedule expression is rate(value unit), cron(minutes hours day-of-month month day-of-week year) \
                 or at(yyyy-mm-ddThh:mm:ss), found {text:?}"
            ));
        };
        Ok(Self { kind, zone })
    }

    /// The first occurrence strictly after `after`; `anchor` is when the schedule was created
    /// (rate schedules tick at `anchor + k·period`, `k ≥ 1`; cron and `at` ignore it). `None`
    /// when no occurrence is left (a past `at`, a cron whose years are over or that can never
    /// match, a time past what the arithmetic holds).
    pub fn next_after(&self, after: Millis, anchor: Millis) -> Option<Millis> {
        match &self.kind {
            Kind::Rate(period) => {
                let ticks = if after < anchor { 1 } else { (after - anchor) / period + 1 };
                anchor.checked_add(ticks.checked_mul(*period)?)
            }
            Kind::Cron(cron) => cron.next_after(&self.zone, after),
            Kind::At(at) => u64::try_from(*at).ok().filter(|&at| at > after),
        }
    }

    /// Whether the period is under one minute: only `rate(N second(s))`, which the caller
    /// allows under test seams alone (EventBridge's minimum is one minute).
    pub fn is_sub_minute(&self) -> bool {
        matches!(self.kind, Kind::Rate(period) if period < MINUTE_MS)
    }
}

/// One minute, in milliseconds.
const MINUTE_MS: u64 = 60_000;

/// The zone named `name`, UTC for `None`.
fn time_zone(name: Option<&str>) -> Result<TimeZone, String> {
    let Some(name) = name else { return Ok(TimeZone::UTC) };
    match TimeZone::get(name) {
        Ok(zone) if !zone.is_unknown() => Ok(zone),
        _ => {
            Err(format!("unknown time zone {name:?}: expected an IANA name such as Europe/Berlin or America/New_York"))
        }
    }
}

/// `Some(inside)` when `text` is `name(inside)`, `None` when it does not start with `name(`,
/// an error when it does but does not end with `)`.
fn arguments<'a>(text: &'a str, name: &str) -> Result<Option<&'a str>, String> {
    let Some(rest) = text.strip_prefix(name).and_then(|rest| rest.strip_prefix('(')) else { return Ok(None) };
    rest.strip_suffix(')').map(Some).ok_or_else(|| format!("{name}(...) must end with `)`, found {text:?}"))
}

/// The period of `rate(value unit)`, in milliseconds.
fn parse_rate(body: &str) -> Result<u64, String> {
    let words: Vec<&str> = body.split_whitespace().collect();
    let [value, unit] = words[..] else {
        return Err(format!("rate(...) needs a value and a unit, e.g. rate(5 minutes), found {body:?}"));
    };
    if !is_number(value) {
        return Err(format!("rate(...) value must be a positive integer, found {value:?}"));
    }
    let value: u64 = value.parse().map_err(|_| format!("rate(...) value {value} is too large"))?;
    if value == 0 {
        return Err("rate(...) value must be a positive integer, found 0".to_owned());
    }
    let unit_ms = match unit {
        "second" | "seconds" if value >= 60 => {
            return Err(format!(
                "rate(...) in seconds takes 1-59 (periods under a minute, for tests); use minutes, hours or days, \
                 found {value} seconds"
            ))
        }
        "second" | "seconds" => 1_000,
        "minute" | "minutes" => MINUTE_MS,
        "hour" | "hours" => 60 * MINUTE_MS,
        "day" | "days" => 24 * 60 * MINUTE_MS,
        _ => return Err(format!("rate(...) unit must be minute(s), hour(s) or day(s), found {unit:?}")),
    };
    value.checked_mul(unit_ms).ok_or_else(|| format!("rate(...) value {value} is too large"))
}

/// Whether `text` is a non-empty run of ASCII digits.
fn is_number(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit())
}

/// The instant `at(yyyy-mm-ddThh:mm:ss)` names in `zone`, in milliseconds.
fn parse_at(body: &str, zone: &TimeZone) -> Result<i64, String> {
    let shape = || format!("at(...) needs a local date and time yyyy-mm-ddThh:mm:ss, found {body:?}");
    let bytes = body.as_bytes();
    if bytes.len() != 19 {
        return Err(shape());
    }
    let well_formed = bytes.iter().enumerate().all(|(index, &byte)| match index {
        4 | 7 => byte == b'-',
        10 => byte == b'T',
        13 | 16 => byte == b':',
        _ => byte.is_ascii_digit(),
    });
    if !well_formed {
        return Err(shape());
    }
    // Digits only (checked above), at most four: the parses cannot fail.
    let number = |from: usize, to: usize| body[from..to].parse::<i16>().unwrap_or(-1);
    let local = DateTime::new(
        number(0, 4),
        number(5, 7) as i8,
        number(8, 10) as i8,
        number(11, 13) as i8,
        number(14, 16) as i8,
        number(17, 19) as i8,
        0,
    )
    .map_err(|_| format!("at(...) names no such date or time: {body}"))?;
    let instant = match zone.to_ambiguous_timestamp(local).offset() {
        AmbiguousOffset::Unambiguous { offset } | AmbiguousOffset::Fold { before: offset, .. } => {
            offset.to_timestamp(local).ok()
        }
        // Skipped by a transition: when the gap ends. `local` read with the later offset is
        // an instant inside the gap, before that transition.
        AmbiguousOffset::Gap { after, .. } => after
            .to_timestamp(local)
            .ok()
            .and_then(|inside| zone.following(inside).next())
            .map(|transition| transition.timestamp()),
    };
    instant.map(Timestamp::as_millisecond).ok_or_else(|| format!("at(...) is out of range: {body}"))
}

/// The instant a local time stands for in `zone`: the only one, or the first of a time
/// repeated when clocks go back; `None` for a time skipped when they go forward.
fn first_instant(zone: &TimeZone, local: DateTime) -> Option<Timestamp> {
    match zone.to_ambiguous_timestamp(local).offset() {
        AmbiguousOffset::Unambiguous { offset } | AmbiguousOffset::Fold { before: offset, .. } => {
            offset.to_timestamp(local).ok()
        }
        AmbiguousOffset::Gap { .. } => None,
    }
}

/// A parsed `cron(…)`: the set of values of each field.
#[derive(Debug, Clone)]
struct Cron {
    minutes: Values,
    hours: Values,
    days: Days,
    months: Values,
    years: Values,
}

/// The field that names the days (the other one is `?`).
#[derive(Debug, Clone)]
enum Days {
    OfMonth(DayOfMonth),
    OfWeek(DayOfWeek),
}

/// A day-of-month field other than `?`.
#[derive(Debug, Clone)]
enum DayOfMonth {
    /// Days 1-31 (those past the month's end never match).
    Listed(Values),
    /// `L`: the last day of the month.
    Last,
    /// `LW`: the last weekday (Monday–Friday) of the month.
    LastWeekday,
    /// `nW`: the weekday nearest day `n`, within the month.
    NearestWeekday(u8),
}

/// A day-of-week field other than `?`; days are 1 (Sunday) to 7 (Saturday).
#[derive(Debug, Clone)]
enum DayOfWeek {
    /// Days of the week (`L` alone is Saturday).
    Listed(Values),
    /// `nL`: the last such day of the month.
    Last(u8),
    /// `n#k`: the `k`-th such day of the month.
    Nth { weekday: u8, nth: u8 },
}

/// A set of field values from `min` to `min + 255`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Values {
    min: u16,
    bits: [u64; 4],
}

impl Values {
    fn empty(min: u16) -> Self {
        Self { min, bits: [0; 4] }
    }

    fn insert(&mut self, value: u16) {
        let index = usize::from(value - self.min);
        self.bits[index / 64] |= 1 << (index % 64);
    }

    fn contains(&self, value: u16) -> bool {
        self.first_from(value) == Some(value)
    }

    /// The smallest value `≥ from` in the set.
    fn first_from(&self, from: u16) -> Option<u16> {
        let mut index = usize::from(from.saturating_sub(self.min));
        while index < 256 {
            let word = self.bits[index / 64] >> (index % 64);
            if word != 0 {
                return u16::try_from(index + word.trailing_zeros() as usize).ok().map(|offset| self.min + offset);
            }
            index = (index / 64 + 1) * 64;
        }
        None
    }
}

/// What one cron field accepts.
struct Spec {
    name: &'static str,
    min: u16,
    max: u16,
    /// Names of the values from `min` on (months, days of the week).
    names: &'static [&'static str],
    /// Whether a range may wrap around (`FRI-MON`).
    wraps: bool,
}

const MINUTES: Spec = Spec { name: "minutes", min: 0, max: 59, names: &[], wraps: true };
const HOURS: Spec = Spec { name: "hours", min: 0, max: 23, names: &[], wraps: true };
const DAY_OF_MONTH: Spec = Spec { name: "day-of-month", min: 1, max: 31, names: &[], wraps: true };
const MONTH: Spec = Spec {
    name: "month",
    min: 1,
    max: 12,
    names: &["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
    wraps: true,
};
const DAY_OF_WEEK: Spec = Spec {
    name: "day-of-week",
    min: 1,
    max: 7,
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    wraps: true,
};
const YEAR: Spec = Spec { name: "year", min: 1970, max: 2199, names: &[], wraps: false };

impl Spec {
    /// The values accepted, for messages: `0-59`, `1-12 or JAN-DEC`.
    fn expected(&self) -> String {
        match (self.names.first(), self.names.last()) {
            (Some(first), Some(last)) => format!("{}-{} or {first}-{last}", self.min, self.max),
            _ => format!("{}-{}", self.min, self.max),
        }
    }

    /// One value: a number or a name.
    fn value(&self, token: &str) -> Result<u16, String> {
        if is_number(token) {
            return token
                .parse::<u16>()
                .ok()
                .filter(|value| (self.min..=self.max).contains(value))
                .ok_or_else(|| format!("{} value {token} is out of range {}", self.name, self.expected()));
        }
        match self.names.iter().position(|name| name.eq_ignore_ascii_case(token)) {
            Some(index) => Ok(self.min + index as u16),
            None => Err(format!("{} field: {token:?} is not a value ({})", self.name, self.expected())),
        }
    }

    /// The increment after `/`.
    fn step(&self, token: &str) -> Result<u16, String> {
        let span = self.max - self.min + 1;
        token
            .parse::<u16>()
            .ok()
            .filter(|step| is_number(token) && (1..=span).contains(step))
            .ok_or_else(|| format!("{} increment {token:?} must be a whole number from 1 to {span}", self.name))
    }

    /// A field of `*`, values, ranges and increments, separated by commas.
    fn values(&self, field: &str) -> Result<Values, String> {
        if field == "?" {
            return Err(format!("? is only allowed in day-of-month or day-of-week, found in {}", self.name));
        }
        let span = self.max - self.min + 1;
        let mut values = Values::empty(self.min);
        for item in field.split(',') {
            if item.is_empty() {
                return Err(format!("{} field {field:?} has an empty list item", self.name));
            }
            let (range, step) = match item.split_once('/') {
                Some((range, step)) => (range, Some(self.step(step)?)),
                None => (item, None),
            };
            let (start, end) = if range == "*" {
                (self.min, self.max)
            } else if let Some((start, end)) = range.split_once('-') {
                (self.value(start)?, self.value(end)?)
            } else {
                let start = self.value(range)?;
                (start, if step.is_some() { self.max } else { start })
            };
            if start > end && !self.wraps {
                return Err(format!("{} range {range} runs backwards", self.name));
            }
            let length = (end + span - start) % span;
            let step = step.unwrap_or(1);
            let mut offset = 0;
            while offset <= length {
                values.insert(self.min + (start - self.min + offset) % span);
                offset += step;
            }
        }
        Ok(values)
    }
}

/// Parses the six fields of `cron(…)`.
fn parse_cron(body: &str) -> Result<Cron, String> {
    let fields: Vec<&str> = body.split_whitespace().collect();
    let [minutes, hours, day_of_month, month, day_of_week, year] = fields[..] else {
        return Err(format!(
            "cron(...) needs 6 fields (minutes hours day-of-month month day-of-week year), found {}",
            fields.len()
        ));
    };
    let minutes = MINUTES.values(minutes)?;
    let hours = HOURS.values(hours)?;
    let days = match (parse_day_of_month(day_of_month)?, parse_day_of_week(day_of_week)?) {
        (Some(days), None) => Days::OfMonth(days),
        (None, Some(days)) => Days::OfWeek(days),
        (None, None) => {
            return Err(
                "cron(...) cannot have ? in both day-of-month and day-of-week: one of them names the days".to_owned()
            )
        }
        (Some(_), Some(_)) => {
            return Err(format!(
                "cron(...) needs ? in day-of-month or day-of-week (the other names the days, * included), \
                 found {day_of_month:?} and {day_of_week:?}"
            ))
        }
    };
    Ok(Cron { minutes, hours, days, months: MONTH.values(month)?, years: YEAR.values(year)? })
}

/// The day-of-month field; `None` for `?`.
fn parse_day_of_month(field: &str) -> Result<Option<DayOfMonth>, String> {
    let upper = field.to_ascii_uppercase();
    match upper.as_str() {
        "?" => return Ok(None),
        "L" => return Ok(Some(DayOfMonth::Last)),
        "LW" => return Ok(Some(DayOfMonth::LastWeekday)),
        _ => {}
    }
    if let Some(day) = upper.strip_suffix('W').filter(|day| is_number(day)) {
        return DAY_OF_MONTH.value(day).map(|day| Some(DayOfMonth::NearestWeekday(day as u8)));
    }
    if upper.contains(['L', 'W']) {
        return Err(format!(
            "day-of-month L and W stand alone: L (last day), LW (last weekday) or one day like 15W \
             (the weekday nearest the 15th), found {field:?}"
        ));
    }
    DAY_OF_MONTH.values(field).map(|days| Some(DayOfMonth::Listed(days)))
}

/// The day-of-week field; `None` for `?`.
fn parse_day_of_week(field: &str) -> Result<Option<DayOfWeek>, String> {
    let upper = field.to_ascii_uppercase();
    match upper.as_str() {
        "?" => return Ok(None),
        "L" => {
            let mut saturday = Values::empty(DAY_OF_WEEK.min);
            saturday.insert(DAY_OF_WEEK.max);
            return Ok(Some(DayOfWeek::Listed(saturday)));
        }
        _ => {}
    }
    if let Some((day, nth)) = upper.split_once('#') {
        let weekday = DAY_OF_WEEK.value(day).ok();
        let nth = Some(nth).filter(|nth| is_number(nth)).and_then(|nth| nth.parse::<u8>().ok());
        let nth = nth.filter(|nth| (1..=5).contains(nth));
        let (Some(weekday), Some(nth)) = (weekday, nth) else {
            return Err(format!(
                "day-of-week # takes one day and an occurrence 1-5 (3#2: the second Tuesday of the month), \
                 found {field:?}"
            ));
        };
        return Ok(Some(DayOfWeek::Nth { weekday: weekday as u8, nth }));
    }
    if let Some(day) = upper.strip_suffix('L') {
        return match DAY_OF_WEEK.value(day) {
            Ok(weekday) => Ok(Some(DayOfWeek::Last(weekday as u8))),
            Err(_) => Err(format!(
                "day-of-week L stands alone (Saturday) or after one day (6L: the last Friday of the month), \
                 found {field:?}"
            )),
        };
    }
    if upper.contains('/') {
        return Err(format!("day-of-week takes no increments (/); list the days instead, found {field:?}"));
    }
    DAY_OF_WEEK.values(field).map(|days| Some(DayOfWeek::Listed(days)))
}

/// A local minute. Fields may run past their range while searching (minute 60, month 13):
/// the search then moves on to the next hour, year….
#[derive(Debug, Clone, Copy)]
struct Minute {
    year: u16,
    month: u16,
    day: u16,
    hour: u16,
    minute: u16,
}

impl Minute {
    fn of(local: DateTime) -> Option<Self> {
        Some(Self {
            year: u16::try_from(local.year()).ok()?,
            month: local.month() as u16,
            day: local.day() as u16,
            hour: local.hour() as u16,
            minute: local.minute() as u16,
        })
    }

    /// The next minute (possibly out of range, see the type).
    fn next(self) -> Self {
        Self { minute: self.minute + 1, ..self }
    }

    /// As a civil date and time (fields in range).
    fn local(self) -> Option<DateTime> {
        let [month, day, hour, minute] = [self.month, self.day, self.hour, self.minute].map(|field| field as i8);
        DateTime::new(i16::try_from(self.year).ok()?, month, day, hour, minute, 0, 0).ok()
    }
}

impl Cron {
    /// The first occurrence strictly after `after` in `zone`.
    fn next_after(&self, zone: &TimeZone, after: Millis) -> Option<Millis> {
        let after = Timestamp::from_millisecond(i64::try_from(after).ok()?).ok()?;
        let mut from = Minute::of(zone.to_datetime(after))?.next();
        loop {
            let candidate = self.first_from(from)?;
            // A local time skipped by a transition does not occur; one repeated occurs at its
            // first instant, which may be at or before `after` (then it is over).
            match first_instant(zone, candidate.local()?) {
                Some(instant) if instant > after => return u64::try_from(instant.as_millisecond()).ok(),
                _ => from = candidate.next(),
            }
        }
    }

    /// The first local minute `≥ from` the fields match; `None` past the last year.
    fn first_from(&self, from: Minute) -> Option<Minute> {
        let Minute { mut year, mut month, mut day, mut hour, mut minute } = from;
        loop {
            let matched_year = self.years.first_from(year)?;
            if matched_year != year {
                (year, month, day, hour, minute) = (matched_year, 1, 1, 0, 0);
            }
            let Some(matched_month) = self.months.first_from(month) else {
                (year, month, day, hour, minute) = (year + 1, 1, 1, 0, 0);
                continue;
            };
            if matched_month != month {
                (month, day, hour, minute) = (matched_month, 1, 0, 0);
            }
            let Some(matched_day) = self.first_day(year, month, day) else {
                (month, day, hour, minute) = (month + 1, 1, 0, 0);
                continue;
            };
            if matched_day != day {
                (day, hour, minute) = (matched_day, 0, 0);
            }
            let Some(matched_hour) = self.hours.first_from(hour) else {
                (day, hour, minute) = (day + 1, 0, 0);
                continue;
            };
            if matched_hour != hour {
                (hour, minute) = (matched_hour, 0);
            }
            let Some(matched_minute) = self.minutes.first_from(minute) else {
                (hour, minute) = (hour + 1, 0);
                continue;
            };
            return Some(Minute { year, month, day, hour, minute: matched_minute });
        }
    }

    /// The first day `≥ from` of `year`-`month` the day fields match.
    fn first_day(&self, year: u16, month: u16, from: u16) -> Option<u16> {
        let first = Date::new(i16::try_from(year).ok()?, i8::try_from(month).ok()?, 1).ok()?;
        let last = first.days_in_month() as u16;
        if from > last {
            return None;
        }
        // Day of the week of `day`, 1 (Sunday) to 7 (Saturday).
        let first_weekday = first.weekday().to_sunday_zero_offset() as u16;
        let weekday = |day: u16| (first_weekday + day - 1) % 7 + 1;
        let day = match &self.days {
            Days::OfMonth(DayOfMonth::Listed(days)) => days.first_from(from)?,
            Days::OfMonth(DayOfMonth::Last) => last,
            Days::OfMonth(DayOfMonth::LastWeekday) => match weekday(last) {
                1 => last - 2,
                7 => last - 1,
                _ => last,
            },
            Days::OfMonth(DayOfMonth::NearestWeekday(day)) => {
                let day = u16::from(*day);
                match weekday(day) {
                    _ if day > last => return None,
                    7 if day == 1 => 3,
                    7 => day - 1,
                    1 if day == last => day - 2,
                    1 => day + 1,
                    _ => day,
                }
            }
            Days::OfWeek(DayOfWeek::Listed(weekdays)) => (from..=last).find(|&day| weekdays.contains(weekday(day)))?,
            Days::OfWeek(DayOfWeek::Last(target)) => last - (weekday(last) + 7 - u16::from(*target)) % 7,
            Days::OfWeek(DayOfWeek::Nth { weekday: target, nth }) => {
                1 + (u16::from(*target) + 7 - weekday(1)) % 7 + 7 * (u16::from(*nth) - 1)
            }
        };
        (from..=last).contains(&day).then_some(day)
    }
}

#[cfg(test)]
#[path = "expr_tests.rs"]
mod tests;
