//! Multi-row statements: a commit's rows of one table go to SQLite in a few
//! `INSERT … VALUES (…), (…), …` statements instead of one statement per row.
//!
//! Each statement costs a fixed amount besides its rows — binding through rusqlite, opening
//! the table's cursor, halting and resetting the program — which for a short event row is
//! about as much as the row itself. A commit's rows are cut into statements of
//! [`BATCH_SIZES`] rows (largest first), so only those few statement texts are ever prepared
//! (and kept in the connection's statement cache) and a chained commit of many steps pays the
//! fixed part once per 16 rows.

use rusqlite::{Connection, Statement};
use trellis_core::StoreError;

use crate::store::unavailable;

/// Rows per statement, largest first; the last is 1 so every count is covered.
pub(crate) const BATCH_SIZES: [usize; 3] = [16, 4, 1];

/// A multi-row statement: `head` (`INSERT … (columns) VALUES`) and `columns` parameters per
/// row, with the statement texts for each batch size written once.
pub(crate) struct Batched {
    texts: [String; BATCH_SIZES.len()],
    columns: usize,
}

impl Batched {
    /// The statement `head` followed by `size` groups of `columns` placeholders, numbered
    /// from 1 (row `r`'s column `c` is parameter `r * columns + c + 1`), and `tail` (an
    /// `ON CONFLICT` clause, or empty).
    pub(crate) fn new(head: &str, columns: usize, tail: &str) -> Self {
        let text = |size: usize| {
            let mut sql = String::with_capacity(head.len() + tail.len() + size * columns * 6);
            sql.push_str(head);
            for row in 0..size {
                sql.push_str(if row == 0 { " (" } else { ", (" });
                for column in 0..columns {
                    if column > 0 {
                        sql.push_str(", ");
                    }
                    sql.push('?');
                    sql.push_str(&(row * columns + column + 1).to_string());
                }
                sql.push(')');
            }
            sql.push_str(tail);
            sql
        };
        Self { texts: BATCH_SIZES.map(text), columns }
    }

    /// Inserts `rows`: `bind(statement, first, row)` binds `row`'s columns at parameters
    /// `first..first + columns`. Returns the rows written.
    pub(crate) fn execute<T>(
        &self,
        connection: &Connection,
        rows: &[T],
        bind: impl Fn(&mut Statement<'_>, usize, &T) -> rusqlite::Result<()>,
    ) -> Result<usize, StoreError> {
        let mut rest = rows;
        for (text, size) in self.texts.iter().zip(BATCH_SIZES) {
            if rest.len() < size {
                continue;
            }
            let mut statement = connection.prepare_cached(text).map_err(unavailable)?;
            while rest.len() >= size {
                let (batch, after) = rest.split_at(size);
                for (index, row) in batch.iter().enumerate() {
                    bind(&mut statement, index * self.columns + 1, row).map_err(unavailable)?;
                }
                statement.raw_execute().map_err(unavailable)?;
                rest = after;
            }
        }
        Ok(rows.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_number_every_placeholder_once_per_row_and_column() {
        let batched = Batched::new("INSERT INTO t (a, b) VALUES", 2, " ON CONFLICT DO NOTHING");
        assert_eq!(batched.texts[2], "INSERT INTO t (a, b) VALUES (?1, ?2) ON CONFLICT DO NOTHING");
        assert_eq!(
            batched.texts[1],
            "INSERT INTO t (a, b) VALUES (?1, ?2), (?3, ?4), (?5, ?6), (?7, ?8) ON CONFLICT DO NOTHING"
        );
        assert!(batched.texts[0].contains("(?31, ?32) ON CONFLICT"));
    }

    #[test]
    fn every_count_of_rows_is_written_once_and_in_order() {
        let connection = Connection::open_in_memory().unwrap();
        connection.execute_batch("CREATE TABLE t (position INTEGER PRIMARY KEY, label TEXT NOT NULL)").unwrap();
        let batched = Batched::new("INSERT INTO t (position, label) VALUES", 2, "");
        let mut next = 0;
        for count in [0usize, 1, 3, 4, 5, 16, 17, 21, 38] {
            let rows: Vec<(i64, String)> = (next..next + count as i64).map(|i| (i, format!("row {i}"))).collect();
            let written = batched
                .execute(&connection, &rows, |statement, first, (position, label)| {
                    statement.raw_bind_parameter(first, position)?;
                    statement.raw_bind_parameter(first + 1, label)
                })
                .unwrap();
            assert_eq!(written, count);
            next += count as i64;
        }
        let stored: Vec<(i64, String)> = connection
            .prepare("SELECT position, label FROM t ORDER BY position")
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(stored.len() as i64, next);
        assert!(stored
            .iter()
            .enumerate()
            .all(|(i, (position, label))| *position == i as i64 && *label == format!("row {i}")));
    }

    #[test]
    fn a_failing_row_fails_the_call() {
        let connection = Connection::open_in_memory().unwrap();
        connection.execute_batch("CREATE TABLE t (position INTEGER PRIMARY KEY)").unwrap();
        let batched = Batched::new("INSERT INTO t (position) VALUES", 1, "");
        let rows = [1i64, 2, 2];
        let result = batched
            .execute(&connection, &rows, |statement, first, position| statement.raw_bind_parameter(first, position));
        assert!(result.is_err());
    }
}
