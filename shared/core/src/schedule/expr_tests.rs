//! Unit tests of schedule expressions.

use jiff::civil::Weekday;

use super::*;

/// An instant written in RFC 3339 (`2026-01-01T10:00:00Z`, `…+02:00`).
fn ms(text: &str) -> Millis {
    let instant: Timestamp = text.parse().unwrap_or_else(|error| panic!("{text}: {error}"));
    u64::try_from(instant.as_millisecond()).unwrap()
}

fn schedule(expression: &str, zone: Option<&str>) -> ScheduleExpr {
    ScheduleExpr::parse(expression, zone).unwrap_or_else(|error| panic!("{expression}: {error}"))
}

fn refusal(expression: &str) -> String {
    match ScheduleExpr::parse(expression, None) {
        Ok(parsed) => panic!("{expression} parsed as {parsed:?}"),
        Err(message) => message,
    }
}

/// `at` in `zone`'s local time with its offset, to the minute: `2026-03-30T02:30+02:00`.
fn render(at: Millis, zone: &TimeZone) -> String {
    let instant = Timestamp::from_millisecond(i64::try_from(at).unwrap()).unwrap();
    instant.to_zoned_datetime(zone.clone()).strftime("%Y-%m-%dT%H:%M%:z").to_string()
}

/// The first `count` occurrences strictly after `after` (fewer when the schedule ends).
fn walk(expression: &str, zone: Option<&str>, after: &str, count: usize) -> Vec<String> {
    let parsed = schedule(expression, zone);
    let tz = TimeZone::get(zone.unwrap_or("UTC")).unwrap();
    let mut at = ms(after);
    let mut occurrences = Vec::new();
    while occurrences.len() < count {
        let Some(next) = parsed.next_after(at, 0) else { break };
        assert!(next > at, "{expression}: {next} after {at}");
        occurrences.push(render(next, &tz));
        at = next;
    }
    occurrences
}

// ---- parse refusals -------------------------------------------------------------------

#[test]
fn unknown_forms_are_refused_naming_the_three_forms() {
    for text in ["", "every 5 minutes", "Rate(5 minutes)", "rate 5 minutes", "cron 0 10 * * ? *"] {
        let message = refusal(text);
        assert!(message.starts_with("a schedule expression is rate(value unit), cron("), "{text}: {message}");
    }
    assert_eq!(refusal("rate(5 minutes"), "rate(...) must end with `)`, found \"rate(5 minutes\"");
    assert_eq!(refusal("at(2026-01-01T10:00:00"), "at(...) must end with `)`, found \"at(2026-01-01T10:00:00\"");
}

#[test]
fn rate_refusals_name_the_rule() {
    assert_eq!(refusal("rate(5)"), "rate(...) needs a value and a unit, e.g. rate(5 minutes), found \"5\"");
    assert_eq!(
        refusal("rate(5 minutes now)"),
        "rate(...) needs a value and a unit, e.g. rate(5 minutes), found \"5 minutes now\""
    );
    assert_eq!(refusal("rate(x minutes)"), "rate(...) value must be a positive integer, found \"x\"");
    assert_eq!(refusal("rate(-1 minutes)"), "rate(...) value must be a positive integer, found \"-1\"");
    assert_eq!(refusal("rate(1.5 hours)"), "rate(...) value must be a positive integer, found \"1.5\"");
    assert_eq!(refusal("rate(0 minutes)"), "rate(...) value must be a positive integer, found 0");
    assert_eq!(refusal("rate(5 weeks)"), "rate(...) unit must be minute(s), hour(s) or day(s), found \"weeks\"");
    assert_eq!(refusal("rate(5 Minutes)"), "rate(...) unit must be minute(s), hour(s) or day(s), found \"Minutes\"");
    assert_eq!(
        refusal("rate(60 seconds)"),
        "rate(...) in seconds takes 1-59 (periods under a minute, for tests); use minutes, hours or days, \
         found 60 seconds"
    );
    assert_eq!(refusal("rate(99999999999999999999 days)"), "rate(...) value 99999999999999999999 is too large");
    assert_eq!(refusal("rate(999999999999999999 days)"), "rate(...) value 999999999999999999 is too large");
}

#[test]
fn cron_needs_six_fields() {
    assert_eq!(
        refusal("cron(0 10 * * ?)"),
        "cron(...) needs 6 fields (minutes hours day-of-month month day-of-week year), found 5"
    );
    assert_eq!(
        refusal("cron(0 0 10 * * ? *)"),
        "cron(...) needs 6 fields (minutes hours day-of-month month day-of-week year), found 7"
    );
    assert_eq!(
        refusal("cron()"),
        "cron(...) needs 6 fields (minutes hours day-of-month month day-of-week year), found 0"
    );
}

#[test]
fn cron_values_out_of_range_are_refused_per_field() {
    assert_eq!(refusal("cron(60 10 * * ? *)"), "minutes value 60 is out of range 0-59");
    assert_eq!(refusal("cron(0 24 * * ? *)"), "hours value 24 is out of range 0-23");
    assert_eq!(refusal("cron(0 10 0 * ? *)"), "day-of-month value 0 is out of range 1-31");
    assert_eq!(refusal("cron(0 10 32 * ? *)"), "day-of-month value 32 is out of range 1-31");
    assert_eq!(refusal("cron(0 10 * 13 ? *)"), "month value 13 is out of range 1-12 or JAN-DEC");
    assert_eq!(refusal("cron(0 10 * JANUARY ? *)"), "month field: \"JANUARY\" is not a value (1-12 or JAN-DEC)");
    assert_eq!(refusal("cron(0 10 ? * 0 *)"), "day-of-week value 0 is out of range 1-7 or SUN-SAT");
    assert_eq!(refusal("cron(0 10 ? * 8 *)"), "day-of-week value 8 is out of range 1-7 or SUN-SAT");
    assert_eq!(refusal("cron(0 10 ? * SUNDAY *)"), "day-of-week field: \"SUNDAY\" is not a value (1-7 or SUN-SAT)");
    assert_eq!(refusal("cron(0 10 * * ? 1969)"), "year value 1969 is out of range 1970-2199");
    assert_eq!(refusal("cron(0 10 * * ? 2200)"), "year value 2200 is out of range 1970-2199");
    assert_eq!(refusal("cron(99999 10 * * ? *)"), "minutes value 99999 is out of range 0-59");
    assert_eq!(refusal("cron(a 10 * * ? *)"), "minutes field: \"a\" is not a value (0-59)");
    assert_eq!(refusal("cron(0 L * * ? *)"), "hours field: \"L\" is not a value (0-23)");
}

#[test]
fn cron_lists_ranges_and_increments_are_checked() {
    assert_eq!(refusal("cron(0,,5 10 * * ? *)"), "minutes field \"0,,5\" has an empty list item");
    assert_eq!(refusal("cron(0/0 10 * * ? *)"), "minutes increment \"0\" must be a whole number from 1 to 60");
    assert_eq!(refusal("cron(0/61 10 * * ? *)"), "minutes increment \"61\" must be a whole number from 1 to 60");
    assert_eq!(refusal("cron(0/x 10 * * ? *)"), "minutes increment \"x\" must be a whole number from 1 to 60");
    assert_eq!(refusal("cron(0 10 * * ? 2030-2025)"), "year range 2030-2025 runs backwards");
    assert_eq!(refusal("cron(1-2-3 10 * * ? *)"), "minutes field: \"2-3\" is not a value (0-59)");
    assert_eq!(refusal("cron(-5 10 * * ? *)"), "minutes field: \"\" is not a value (0-59)");
    assert_eq!(refusal("cron(? 10 * * ? *)"), "? is only allowed in day-of-month or day-of-week, found in minutes");
    assert_eq!(refusal("cron(0 10 * ? ? *)"), "? is only allowed in day-of-month or day-of-week, found in month");
}

#[test]
fn exactly_one_of_the_day_fields_is_a_question_mark() {
    assert_eq!(
        refusal("cron(0 10 * * * *)"),
        "cron(...) needs ? in day-of-month or day-of-week (the other names the days, * included), \
         found \"*\" and \"*\""
    );
    assert_eq!(
        refusal("cron(0 10 1 * MON *)"),
        "cron(...) needs ? in day-of-month or day-of-week (the other names the days, * included), \
         found \"1\" and \"MON\""
    );
    assert_eq!(
        refusal("cron(0 10 ? * ? *)"),
        "cron(...) cannot have ? in both day-of-month and day-of-week: one of them names the days"
    );
}

#[test]
fn l_w_and_hash_stand_alone_in_their_fields() {
    let day_of_month = "day-of-month L and W stand alone: L (last day), LW (last weekday) or one day like 15W \
                        (the weekday nearest the 15th), found";
    for field in ["L-3", "1,L", "1-15W", "W", "LW,1", "15W,20W"] {
        assert_eq!(refusal(&format!("cron(0 10 {field} * ? *)")), format!("{day_of_month} {field:?}"));
    }
    assert_eq!(refusal("cron(0 10 32W * ? *)"), "day-of-month value 32 is out of range 1-31");
    let nth = "day-of-week # takes one day and an occurrence 1-5 (3#2: the second Tuesday of the month), found";
    for field in ["3#1,6#3", "3#0", "3#6", "8#1", "#2", "3#", "MON-FRI#1"] {
        assert_eq!(refusal(&format!("cron(0 10 ? * {field} *)")), format!("{nth} {field:?}"));
    }
    let last = "day-of-week L stands alone (Saturday) or after one day (6L: the last Friday of the month), found";
    for field in ["1,6L", "2-6L", "8L"] {
        assert_eq!(refusal(&format!("cron(0 10 ? * {field} *)")), format!("{last} {field:?}"));
    }
    assert_eq!(
        refusal("cron(0 10 ? * */2 *)"),
        "day-of-week takes no increments (/); list the days instead, found \"*/2\""
    );
}

#[test]
fn at_needs_a_real_local_date_and_time() {
    let shape = "at(...) needs a local date and time yyyy-mm-ddThh:mm:ss, found";
    for body in ["2026-01-01 10:00:00", "2026-01-01T10:00", "2026-01-01T10:00:00Z", "2026-1-01T10:00:00", ""] {
        assert_eq!(refusal(&format!("at({body})")), format!("{shape} {body:?}"));
    }
    assert_eq!(refusal("at(2026-02-30T10:00:00)"), "at(...) names no such date or time: 2026-02-30T10:00:00");
    assert_eq!(refusal("at(2026-01-01T24:00:00)"), "at(...) names no such date or time: 2026-01-01T24:00:00");
}

#[test]
fn unknown_time_zones_are_refused_by_name() {
    for zone in ["Mars/Olympus_Mons", "", "Etc/Unknown", "CEST+2"] {
        let message = ScheduleExpr::parse("rate(5 minutes)", Some(zone)).unwrap_err();
        assert_eq!(
            message,
            format!("unknown time zone {zone:?}: expected an IANA name such as Europe/Berlin or America/New_York")
        );
    }
    for zone in ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Etc/GMT+5"] {
        schedule("cron(0 10 * * ? *)", Some(zone));
    }
}

#[test]
fn accepted_forms() {
    for text in [
        "rate(1 minute)",
        "rate(1 minutes)",
        "rate(5 minute)",
        "rate(2 hours)",
        "rate(1 hour)",
        "rate(1 day)",
        "rate(7 days)",
        " rate(5 minutes) ",
        "cron(0 10 * * ? *)",
        "cron(0  10 *\t* ? *)",
        "cron(0 10 ? jan-mar,Dec mon-fri,sun 2026-2030,2040/5)",
        "cron(*/5 */2 1-31/2 */3 ? *)",
        "cron(0 10 l * ? *)",
        "cron(0 10 lw * ? *)",
        "cron(0 10 15w * ? *)",
        "cron(0 10 ? * l *)",
        "cron(0 10 ? * fril *)",
        "cron(0 10 ? * mon#2 *)",
        "cron(0 22-2 ? * FRI-MON *)",
        "at(2026-01-01T10:00:00)",
    ] {
        schedule(text, None);
    }
}

// ---- rate ------------------------------------------------------------------------------

#[test]
fn rates_tick_at_anchor_plus_whole_periods() {
    let five = schedule("rate(5 minutes)", None);
    let anchor = ms("2026-01-01T10:00:00Z");
    let minutes = |n: u64| anchor + n * MINUTE_MS;
    assert_eq!(five.next_after(anchor, anchor), Some(minutes(5)));
    assert_eq!(five.next_after(anchor - 1, anchor), Some(minutes(5)));
    assert_eq!(five.next_after(anchor - 3_600_000, anchor), Some(minutes(5)), "k ≥ 1, also before the anchor");
    assert_eq!(five.next_after(minutes(5) - 1, anchor), Some(minutes(5)));
    assert_eq!(five.next_after(minutes(5), anchor), Some(minutes(10)));
    assert_eq!(five.next_after(minutes(7), anchor), Some(minutes(10)));
    assert_eq!(five.next_after(minutes(5 * 1000 + 3), anchor), Some(minutes(5 * 1001)));
    assert_eq!(five.next_after(u64::MAX - 1, anchor), None, "past what a u64 holds");
    assert!(!five.is_sub_minute());
}

#[test]
fn rate_units_and_sub_minute_periods() {
    let anchor = ms("2026-01-01T00:00:00Z");
    for (text, period) in [
        ("rate(1 minute)", MINUTE_MS),
        ("rate(2 hours)", 2 * 3_600_000),
        ("rate(3 days)", 3 * 86_400_000),
        ("rate(30 seconds)", 30_000),
        ("rate(1 second)", 1_000),
    ] {
        let parsed = schedule(text, None);
        assert_eq!(parsed.next_after(anchor, anchor), Some(anchor + period), "{text}");
        assert_eq!(parsed.is_sub_minute(), period < MINUTE_MS, "{text}");
    }
    assert!(schedule("rate(59 seconds)", None).is_sub_minute());
    assert!(!schedule("cron(* * * * ? *)", None).is_sub_minute());
    assert!(!schedule("at(2026-01-01T00:00:00)", None).is_sub_minute());
}

#[test]
fn a_day_rate_is_24_hours_across_daylight_saving() {
    // Berlin springs forward on 2026-03-29: the day after midnight is 01:00 local.
    let daily = schedule("rate(1 day)", Some("Europe/Berlin"));
    let anchor = ms("2026-03-28T00:00:00+01:00");
    let next = daily.next_after(anchor + 86_400_000, anchor).unwrap();
    assert_eq!(render(next, &TimeZone::get("Europe/Berlin").unwrap()), "2026-03-30T01:00+02:00");
}

// ---- cron: the AWS examples ------------------------------------------------------------

#[test]
fn aws_example_daily_at_10() {
    assert_eq!(
        walk("cron(0 10 * * ? *)", None, "2026-01-01T00:00:00Z", 3),
        ["2026-01-01T10:00+00:00", "2026-01-02T10:00+00:00", "2026-01-03T10:00+00:00"]
    );
    assert_eq!(walk("cron(0 10 * * ? *)", None, "2026-01-01T10:00:00Z", 1), ["2026-01-02T10:00+00:00"]);
    assert_eq!(walk("cron(0 10 * * ? *)", None, "2026-01-01T09:59:59.999Z", 1), ["2026-01-01T10:00+00:00"]);
}

#[test]
fn aws_example_daily_at_12_15() {
    assert_eq!(
        walk("cron(15 12 * * ? *)", None, "2026-12-31T12:15:00Z", 2),
        ["2027-01-01T12:15+00:00", "2027-01-02T12:15+00:00"]
    );
}

#[test]
fn aws_example_weekdays_at_18() {
    // 2026-01-02 is a Friday.
    assert_eq!(
        walk("cron(0 18 ? * MON-FRI *)", None, "2026-01-02T18:00:00Z", 5),
        [
            "2026-01-05T18:00+00:00",
            "2026-01-06T18:00+00:00",
            "2026-01-07T18:00+00:00",
            "2026-01-08T18:00+00:00",
            "2026-01-09T18:00+00:00"
        ]
    );
}

#[test]
fn aws_example_first_of_the_month_at_8() {
    assert_eq!(
        walk("cron(0 8 1 * ? *)", None, "2026-01-01T08:00:00Z", 3),
        ["2026-02-01T08:00+00:00", "2026-03-01T08:00+00:00", "2026-04-01T08:00+00:00"]
    );
}

#[test]
fn aws_example_every_10_minutes_on_weekdays() {
    assert_eq!(
        walk("cron(0/10 * ? * MON-FRI *)", None, "2026-01-02T23:45:00Z", 3),
        ["2026-01-02T23:50+00:00", "2026-01-05T00:00+00:00", "2026-01-05T00:10+00:00"]
    );
}

#[test]
fn aws_example_every_5_minutes_in_office_hours() {
    assert_eq!(
        walk("cron(0/5 8-17 ? * MON-FRI *)", None, "2026-01-05T17:50:00Z", 3),
        ["2026-01-05T17:55+00:00", "2026-01-06T08:00+00:00", "2026-01-06T08:05+00:00"]
    );
    let day = walk("cron(0/5 8-17 ? * MON-FRI *)", None, "2026-01-06T00:00:00Z", 200);
    assert_eq!(day.iter().filter(|at| at.starts_with("2026-01-06")).count(), 10 * 12);
}

#[test]
fn aws_example_first_monday_at_9() {
    assert_eq!(
        walk("cron(0 9 ? * 2#1 *)", None, "2026-01-01T00:00:00Z", 3),
        ["2026-01-05T09:00+00:00", "2026-02-02T09:00+00:00", "2026-03-02T09:00+00:00"]
    );
}

// ---- cron: fields ----------------------------------------------------------------------

#[test]
fn increments_ranges_lists_and_wrapping_ranges() {
    assert_eq!(
        walk("cron(5-30/10 10 * * ? *)", None, "2026-01-01T00:00:00Z", 4),
        ["2026-01-01T10:05+00:00", "2026-01-01T10:15+00:00", "2026-01-01T10:25+00:00", "2026-01-02T10:05+00:00"]
    );
    assert_eq!(
        walk("cron(50/5 23 * * ? *)", None, "2026-01-01T00:00:00Z", 3),
        ["2026-01-01T23:50+00:00", "2026-01-01T23:55+00:00", "2026-01-02T23:50+00:00"]
    );
    assert_eq!(
        walk("cron(0 22-1 * * ? *)", None, "2026-01-01T12:00:00Z", 5),
        [
            "2026-01-01T22:00+00:00",
            "2026-01-01T23:00+00:00",
            "2026-01-02T00:00+00:00",
            "2026-01-02T01:00+00:00",
            "2026-01-02T22:00+00:00"
        ]
    );
    // 2026-01-01 is a Thursday: FRI-MON wraps over the weekend.
    assert_eq!(
        walk("cron(0 12 ? * FRI-MON *)", None, "2026-01-01T00:00:00Z", 5),
        [
            "2026-01-02T12:00+00:00",
            "2026-01-03T12:00+00:00",
            "2026-01-04T12:00+00:00",
            "2026-01-05T12:00+00:00",
            "2026-01-09T12:00+00:00"
        ]
    );
    assert_eq!(
        walk("cron(0 0 1 NOV-FEB/2 ? *)", None, "2026-01-01T00:00:00Z", 3),
        ["2026-11-01T00:00+00:00", "2027-01-01T00:00+00:00", "2027-11-01T00:00+00:00"]
    );
    assert_eq!(
        walk("cron(0 0 31 * ? *)", None, "2026-01-31T00:00:00Z", 3),
        ["2026-03-31T00:00+00:00", "2026-05-31T00:00+00:00", "2026-07-31T00:00+00:00"]
    );
}

#[test]
fn last_day_of_the_month() {
    assert_eq!(
        walk("cron(0 0 L * ? *)", None, "2026-01-15T00:00:00Z", 3),
        ["2026-01-31T00:00+00:00", "2026-02-28T00:00+00:00", "2026-03-31T00:00+00:00"]
    );
    assert_eq!(walk("cron(0 0 L 2 ? *)", None, "2027-03-01T00:00:00Z", 1), ["2028-02-29T00:00+00:00"]);
}

#[test]
fn last_weekday_of_the_month() {
    // January 2026 ends on a Saturday, February on a Saturday, May on a Sunday.
    assert_eq!(
        walk("cron(0 0 LW * ? 2026)", None, "2026-01-01T00:00:00Z", 5),
        [
            "2026-01-30T00:00+00:00",
            "2026-02-27T00:00+00:00",
            "2026-03-31T00:00+00:00",
            "2026-04-30T00:00+00:00",
            "2026-05-29T00:00+00:00"
        ]
    );
}

#[test]
fn nearest_weekday_stays_within_the_month() {
    // 15th: Sunday in February and March 2026, Saturday in August.
    assert_eq!(
        walk("cron(0 12 15W * ? 2026)", None, "2026-01-01T00:00:00Z", 8),
        [
            "2026-01-15T12:00+00:00",
            "2026-02-16T12:00+00:00",
            "2026-03-16T12:00+00:00",
            "2026-04-15T12:00+00:00",
            "2026-05-15T12:00+00:00",
            "2026-06-15T12:00+00:00",
            "2026-07-15T12:00+00:00",
            "2026-08-14T12:00+00:00"
        ]
    );
    // 1st: Sunday in February 2026, Saturday in August (Monday the 3rd, not Friday July 31st).
    assert_eq!(
        walk("cron(0 0 1W * ? 2026)", None, "2025-12-31T00:00:00Z", 8),
        [
            "2026-01-01T00:00+00:00",
            "2026-02-02T00:00+00:00",
            "2026-03-02T00:00+00:00",
            "2026-04-01T00:00+00:00",
            "2026-05-01T00:00+00:00",
            "2026-06-01T00:00+00:00",
            "2026-07-01T00:00+00:00",
            "2026-08-03T00:00+00:00"
        ]
    );
    // 31st: Saturday in January and October 2026, Sunday in May; no 31st in the others.
    assert_eq!(
        walk("cron(0 0 31W * ? 2026)", None, "2026-01-01T00:00:00Z", 10),
        [
            "2026-01-30T00:00+00:00",
            "2026-03-31T00:00+00:00",
            "2026-05-29T00:00+00:00",
            "2026-07-31T00:00+00:00",
            "2026-08-31T00:00+00:00",
            "2026-10-30T00:00+00:00",
            "2026-12-31T00:00+00:00"
        ]
    );
}

#[test]
fn last_and_nth_day_of_the_week() {
    assert_eq!(
        walk("cron(0 0 ? * 6L *)", None, "2026-01-01T00:00:00Z", 3),
        ["2026-01-30T00:00+00:00", "2026-02-27T00:00+00:00", "2026-03-27T00:00+00:00"]
    );
    // `L` alone is Saturday, every week.
    assert_eq!(
        walk("cron(0 0 ? * L *)", None, "2026-01-01T00:00:00Z", 2),
        ["2026-01-03T00:00+00:00", "2026-01-10T00:00+00:00"]
    );
    assert_eq!(
        walk("cron(0 9 ? * 3#2 *)", None, "2026-01-01T00:00:00Z", 2),
        ["2026-01-13T09:00+00:00", "2026-02-10T09:00+00:00"]
    );
    // Fifth Fridays of 2026: January and May, then July.
    assert_eq!(
        walk("cron(0 0 ? * FRI#5 *)", None, "2026-01-01T00:00:00Z", 3),
        ["2026-01-30T00:00+00:00", "2026-05-29T00:00+00:00", "2026-07-31T00:00+00:00"]
    );
}

#[test]
fn years_bound_the_schedule() {
    assert_eq!(walk("cron(0 0 1 1 ? 2027)", None, "2026-06-01T00:00:00Z", 5), ["2027-01-01T00:00+00:00"]);
    assert_eq!(
        walk("cron(0 0 1 1 ? 2030-2032,2040)", None, "2026-06-01T00:00:00Z", 5),
        ["2030-01-01T00:00+00:00", "2031-01-01T00:00+00:00", "2032-01-01T00:00+00:00", "2040-01-01T00:00+00:00"]
    );
    assert_eq!(walk("cron(0 0 1 1 ? 2025)", None, "2026-06-01T00:00:00Z", 1), Vec::<String>::new());
    let every_minute = schedule("cron(* * * * ? *)", None);
    assert_eq!(every_minute.next_after(ms("2199-12-31T23:58:00Z"), 0), Some(ms("2199-12-31T23:59:00Z")));
    assert_eq!(every_minute.next_after(ms("2199-12-31T23:59:00Z"), 0), None);
    assert_eq!(every_minute.next_after(ms("2250-01-01T00:00:00Z"), 0), None);
    assert_eq!(every_minute.next_after(u64::MAX, 0), None);
    assert_eq!(every_minute.next_after(0, 0), Some(MINUTE_MS));
}

#[test]
fn impossible_dates_end_the_search_quickly() {
    let started = std::time::Instant::now();
    for text in ["cron(0 0 30 2 ? *)", "cron(0 0 31 4,6,9,11 ? *)", "cron(0 0 ? 2 FRI#5 2026-2027)"] {
        assert_eq!(schedule(text, None).next_after(0, 0), None, "{text}");
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "{:?}", started.elapsed());
}

// ---- at --------------------------------------------------------------------------------

#[test]
fn at_fires_once_at_its_local_time() {
    let once = schedule("at(2026-06-01T09:00:00)", Some("Europe/Berlin"));
    let at = ms("2026-06-01T07:00:00Z");
    assert_eq!(once.next_after(ms("2026-01-01T00:00:00Z"), 0), Some(at));
    assert_eq!(once.next_after(at - 1, 0), Some(at));
    assert_eq!(once.next_after(at, 0), None, "strictly after");
    assert_eq!(once.next_after(at + 1, 0), None);
    assert_eq!(schedule("at(2026-06-01T09:00:00)", None).next_after(0, 0), Some(ms("2026-06-01T09:00:00Z")));
    assert_eq!(schedule("at(1960-01-01T00:00:00)", None).next_after(0, 0), None, "before the epoch");
}

// ---- daylight saving time --------------------------------------------------------------

#[test]
fn berlin_spring_forward_skips_the_missing_time() {
    // 2026-03-29: 02:00 CET becomes 03:00 CEST; 02:30 does not exist that day.
    assert_eq!(
        walk("cron(30 2 * * ? *)", Some("Europe/Berlin"), "2026-03-27T12:00:00Z", 3),
        ["2026-03-28T02:30+01:00", "2026-03-30T02:30+02:00", "2026-03-31T02:30+02:00"]
    );
    assert_eq!(
        walk("cron(0/30 * * * ? *)", Some("Europe/Berlin"), "2026-03-29T01:00:00+01:00", 3),
        ["2026-03-29T01:30+01:00", "2026-03-29T03:00+02:00", "2026-03-29T03:30+02:00"]
    );
}

#[test]
fn berlin_fall_back_fires_once_at_the_first_instant() {
    // 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:00-02:59 happen twice.
    assert_eq!(
        walk("cron(30 2 * * ? *)", Some("Europe/Berlin"), "2026-10-24T12:00:00Z", 2),
        ["2026-10-25T02:30+02:00", "2026-10-26T02:30+01:00"]
    );
    assert_eq!(
        walk("cron(0/30 * * * ? *)", Some("Europe/Berlin"), "2026-10-25T01:00:00+02:00", 5),
        [
            "2026-10-25T01:30+02:00",
            "2026-10-25T02:00+02:00",
            "2026-10-25T02:30+02:00",
            "2026-10-25T03:00+01:00",
            "2026-10-25T03:30+01:00"
        ]
    );
    // Asked from inside the second pass, the repeated times are over.
    assert_eq!(
        walk("cron(0/30 * * * ? *)", Some("Europe/Berlin"), "2026-10-25T02:10:00+01:00", 1),
        ["2026-10-25T03:00+01:00"]
    );
}

#[test]
fn new_york_transitions() {
    // 2026-03-08: 02:00 EST becomes 03:00 EDT. 2026-11-01: 02:00 EDT becomes 01:00 EST.
    assert_eq!(
        walk("cron(0/20 1-3 * * ? *)", Some("America/New_York"), "2026-03-08T01:30:00-05:00", 4),
        ["2026-03-08T01:40-05:00", "2026-03-08T03:00-04:00", "2026-03-08T03:20-04:00", "2026-03-08T03:40-04:00"]
    );
    assert_eq!(
        walk("cron(0 1 * * ? *)", Some("America/New_York"), "2026-10-31T12:00:00Z", 2),
        ["2026-11-01T01:00-04:00", "2026-11-02T01:00-05:00"]
    );
    assert_eq!(
        walk("cron(0 9 ? * MON-FRI *)", Some("America/New_York"), "2026-03-06T00:00:00Z", 2),
        ["2026-03-06T09:00-05:00", "2026-03-09T09:00-04:00"]
    );
}

#[test]
fn at_in_a_transition() {
    let berlin = TimeZone::get("Europe/Berlin").unwrap();
    let skipped = schedule("at(2026-03-29T02:30:00)", Some("Europe/Berlin")).next_after(0, 0).unwrap();
    assert_eq!(render(skipped, &berlin), "2026-03-29T03:00+02:00", "when the gap ends");
    let repeated = schedule("at(2026-10-25T02:30:00)", Some("Europe/Berlin")).next_after(0, 0).unwrap();
    assert_eq!(render(repeated, &berlin), "2026-10-25T02:30+02:00", "the first of the two");
}

// ---- walks -----------------------------------------------------------------------------

#[test]
fn a_hundred_consecutive_occurrences_strictly_increase() {
    for (text, zone) in [
        ("rate(7 minutes)", None),
        ("rate(1 day)", Some("America/New_York")),
        ("cron(0/5 8-17 ? * MON-FRI *)", None),
        ("cron(0 9 ? * 2#1 *)", Some("America/New_York")),
        ("cron(*/7 * L * ? *)", Some("Europe/Berlin")),
        ("cron(30 1-3 * * ? *)", Some("Europe/Berlin")),
        ("cron(0 0 1 1,7 ? *)", Some("Asia/Kolkata")),
    ] {
        let parsed = schedule(text, zone);
        let anchor = ms("2026-01-01T00:00:00Z");
        let mut at = anchor;
        for index in 0..100 {
            let next = parsed.next_after(at, anchor).unwrap_or_else(|| panic!("{text}: ended after {index}"));
            assert!(next > at, "{text}: {next} ≤ {at}");
            at = next;
        }
    }
}

/// Whether the local time matches the cron fields, written plainly (day by day) to check the
/// field-by-field search against.
fn matches(cron: &Cron, local: DateTime) -> bool {
    let date = local.date();
    let last = date.last_of_month().day();
    let weekday = |day: i8| date.with().day(day).build().unwrap().weekday();
    let is_weekday = |day: i8| !matches!(weekday(day), Weekday::Saturday | Weekday::Sunday);
    let sunday_one = |day: i8| weekday(day).to_sunday_one_offset() as u16;
    let day = date.day();
    let day_matches = || match &cron.days {
        Days::OfMonth(DayOfMonth::Listed(days)) => days.contains(day as u16),
        Days::OfMonth(DayOfMonth::Last) => day == last,
        Days::OfMonth(DayOfMonth::LastWeekday) => is_weekday(day) && (day + 1..=last).all(|later| !is_weekday(later)),
        Days::OfMonth(DayOfMonth::NearestWeekday(target)) => {
            let target = *target as i8;
            target <= last
                && (1..=last).filter(|&other| is_weekday(other)).min_by_key(|&other| (other - target).abs())
                    == Some(day)
        }
        Days::OfWeek(DayOfWeek::Listed(days)) => days.contains(sunday_one(day)),
        Days::OfWeek(DayOfWeek::Last(target)) => sunday_one(day) == u16::from(*target) && day + 7 > last,
        Days::OfWeek(DayOfWeek::Nth { weekday: target, nth }) => {
            sunday_one(day) == u16::from(*target) && (day - 1) / 7 + 1 == *nth as i8
        }
    };
    cron.minutes.contains(local.minute() as u16)
        && cron.hours.contains(local.hour() as u16)
        && cron.months.contains(local.month() as u16)
        && cron.years.contains(local.year() as u16)
        && day_matches()
}

#[test]
fn the_search_agrees_with_a_minute_by_minute_scan() {
    let expressions = [
        "cron(0/5 8-17 ? * MON-FRI *)",
        "cron(30 2 * * ? *)",
        "cron(*/20 1-3 * * ? *)",
        "cron(0 9 ? * 2#1 *)",
        "cron(15 0 L * ? *)",
        "cron(0 12 15W * ? *)",
        "cron(0 12 1W * ? *)",
        "cron(0 12 LW * ? *)",
        "cron(45 23 ? * 1L *)",
        "cron(10 22-2 ? * FRI-MON *)",
        "cron(0 0/7 ? * SUN#5 *)",
    ];
    // Winter to spring and summer to autumn, both zones changing within the windows.
    let windows = [("2026-02-20T00:00:00Z", 45), ("2026-10-01T00:00:00Z", 45)];
    for zone_name in ["Europe/Berlin", "America/New_York"] {
        let zone = TimeZone::get(zone_name).unwrap();
        for text in expressions {
            let parsed = schedule(text, Some(zone_name));
            let Kind::Cron(cron) = &parsed.kind else { unreachable!() };
            for (start, days) in windows {
                let start = ms(start);
                let end = start + days * 24 * 60 * MINUTE_MS;
                let mut expected = Vec::new();
                let mut at = start + MINUTE_MS;
                while at < end {
                    let instant = Timestamp::from_millisecond(at as i64).unwrap();
                    let local = zone.to_datetime(instant);
                    if matches(cron, local) && first_instant(&zone, local) == Some(instant) {
                        expected.push(at);
                    }
                    at += MINUTE_MS;
                }
                let mut found = Vec::new();
                let mut at = start;
                while let Some(next) = parsed.next_after(at, 0).filter(|&next| next < end) {
                    found.push(next);
                    at = next;
                }
                assert_eq!(found, expected, "{text} in {zone_name} from {}", render(start, &zone));
            }
        }
    }
}
