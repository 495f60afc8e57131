//! Host records ([`RecordStore`]): one item per record, `REC#<kind>#<scope>` / `<key>`, so the
//! records of one `(kind, scope)` are one partition listed in key order by a query.
//!
//! Attributes: `version` (N, 1 when created, one more per write), `value` (S, the JSON text),
//! `format` (N), and for a record that lapses `expires_at_ms` (N, its exact expiry in
//! milliseconds: what reads and conditions compare with the caller's `now`) and `expires_at`
//! (N, the same instant in epoch seconds rounded up: the table's TTL attribute, so DynamoDB
//! deletes the item some time after — never before — it lapsed). Reads and conditions treat
//! a lapsed item as absent whether or not TTL has deleted it yet.
//!
//! Every write is one conditional request, so DynamoDB decides each race:
//!
//! - `Expect::Absent`: `PutItem` of version 1 if no item exists or it lapsed;
//! - `Expect::Version(v)`: `PutItem` of version `v + 1` if the item is live at version `v`;
//! - `Expect::Any`: `UpdateItem` adding 1 to the version of a live item; if there is none,
//!   `PutItem` of version 1 if there still is none (a lapsed item starts again at 1, which
//!   an `ADD` cannot express); if one was created meanwhile, the update again — at most
//!   [`ANY_ATTEMPTS`] rounds, then `Unavailable` (retryable). Each round is atomic, so the
//!   version returned is the version written.
//! - deletes: `DeleteItem` (returning the old item, to tell whether a live one was deleted)
//!   for `Any`, conditional on the live version for `Version(v)`; `Absent` only reads.
//!
//! Every request is metered ([`crate::Meter`]); a write whose condition fails is billed too.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::ReturnValue;
use serde_json::Value;
use trellis_core::ports::{Expect, Record, RecordStore};
use trellis_core::timefmt::Millis;
use trellis_core::StoreError;

use super::DynamoStore;
use crate::codec::{self, check_limits, get_n, get_s, n, s, Item, BASE_FORMAT};
use crate::errors::{unavailable, written_unless_condition_failed};
use crate::keys::{self, PK, SK};

/// Rounds of update-then-create an `Expect::Any` write tries before giving up (each round
/// fails only if another writer created or deleted the record in between).
const ANY_ATTEMPTS: usize = 8;

/// A live item: no expiry, or one after `:now`.
const LIVE: &str = "(attribute_not_exists(#expires_ms) OR #expires_ms > :now)";

/// Refuses names this table could not keep apart or store (`kind` separates the partition key
/// from `scope` with `#`; a sort key cannot be empty). The SQLite store refuses the same.
fn check_names(kind: &str, key: Option<&str>) -> Result<(), StoreError> {
    if kind.is_empty() || kind.contains('#') {
        return Err(StoreError::LimitExceeded(format!("a record kind must be non-empty without '#': {kind:?}")));
    }
    if key.is_some_and(str::is_empty) {
        return Err(StoreError::LimitExceeded("a record key must not be empty".to_owned()));
    }
    Ok(())
}

fn record_key(kind: &str, scope: &str, key: &str) -> Item {
    Item::from([(PK.to_owned(), s(keys::record_pk(kind, scope))), (SK.to_owned(), s(keys::record_sk(key)))])
}

/// The TTL attribute for an expiry at `expires_at` ms: epoch seconds, rounded up.
fn ttl_seconds(expires_at: Millis) -> u64 {
    expires_at.div_ceil(1000)
}

/// The whole item of a record at `version`.
fn record_item(kind: &str, scope: &str, key: &str, version: u64, value: &str, expires_at: Option<Millis>) -> Item {
    let mut item = record_key(kind, scope, key);
    item.insert("version".into(), n(version));
    item.insert("value".into(), s(value));
    item.insert("format".into(), n(BASE_FORMAT));
    if let Some(at) = expires_at {
        item.insert("expires_at_ms".into(), n(at));
        item.insert("expires_at".into(), n(ttl_seconds(at)));
    }
    item
}

/// The record an item holds, `None` if it lapsed at `now`.
fn decode(kind: &str, scope: &str, item: &Item, now: Millis) -> Result<Option<Record>, StoreError> {
    codec::check_format(item)?;
    let expires_at = item.contains_key("expires_at_ms").then(|| get_n(item, "expires_at_ms")).transpose()?;
    if expires_at.is_some_and(|at| at <= now) {
        return Ok(None);
    }
    let value = serde_json::from_str(get_s(item, "value")?).map_err(|error| StoreError::Corrupt(error.to_string()))?;
    Ok(Some(Record {
        kind: kind.to_owned(),
        scope: scope.to_owned(),
        key: get_s(item, SK)?.to_owned(),
        version: get_n(item, "version")?,
        value,
        expires_at,
    }))
}

impl DynamoStore {
    /// `PutItem` of `item` if `condition` holds (its values `:now` and, when given, `:v`);
    /// `false` when it did not.
    async fn put_record_if(
        &self,
        item: Item,
        condition: &str,
        now: Millis,
        version: Option<u64>,
    ) -> Result<bool, StoreError> {
        let size = codec::item_size(&item);
        let mut put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .expression_attribute_names("#expires_ms", "expires_at_ms")
            .expression_attribute_values(":now", n(now));
        if let Some(version) = version {
            put = put.expression_attribute_names("#version", "version").expression_attribute_values(":v", n(version));
        }
        let written = written_unless_condition_failed(put.send().await)?;
        self.meter.write(size);
        Ok(written.is_some())
    }

    /// Adds 1 to the version of the live item of `item`'s key and writes the rest of `item`
    /// over it; the new version, or `None` when no live item exists.
    async fn update_live_record(&self, item: &Item, now: Millis) -> Result<Option<u64>, StoreError> {
        let lapses = item.contains_key("expires_at_ms");
        let expression = if lapses {
            "SET #value = :value, #format = :format, #expires_ms = :expires_ms, #ttl = :ttl ADD #version :one"
        } else {
            "SET #value = :value, #format = :format ADD #version :one REMOVE #expires_ms, #ttl"
        };
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(PK, item[PK].clone())
            .key(SK, item[SK].clone())
            .update_expression(expression)
            .condition_expression(format!("attribute_exists(#version) AND {LIVE}"))
            .expression_attribute_names("#value", "value")
            .expression_attribute_names("#format", "format")
            .expression_attribute_names("#version", "version")
            .expression_attribute_names("#expires_ms", "expires_at_ms")
            .expression_attribute_names("#ttl", "expires_at")
            .expression_attribute_values(":value", item["value"].clone())
            .expression_attribute_values(":format", item["format"].clone())
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":now", n(now))
            .return_values(ReturnValue::UpdatedNew);
        if lapses {
            update = update
                .expression_attribute_values(":expires_ms", item["expires_at_ms"].clone())
                .expression_attribute_values(":ttl", item["expires_at"].clone());
        }
        let updated = written_unless_condition_failed(update.send().await)?;
        self.meter.write(codec::item_size(item));
        let Some(output) = updated else { return Ok(None) };
        let attributes = output.attributes().cloned().unwrap_or_default();
        get_n(&attributes, "version").map(Some)
    }
}

#[async_trait]
impl RecordStore for DynamoStore {
    async fn record(&self, kind: &str, scope: &str, key: &str, now: Millis) -> Result<Option<Record>, StoreError> {
        check_names(kind, Some(key))?;
        let Some(item) = self.get(record_key(kind, scope, key)).await? else { return Ok(None) };
        decode(kind, scope, &item, now)
    }

    async fn put_record(
        &self,
        kind: &str,
        scope: &str,
        key: &str,
        value: &Value,
        expires_at: Option<Millis>,
        expect: Expect,
        now: Millis,
    ) -> Result<u64, StoreError> {
        check_names(kind, Some(key))?;
        let text = serde_json::to_string(value).map_err(|error| StoreError::Corrupt(error.to_string()))?;
        let item = |version: u64| record_item(kind, scope, key, version, &text, expires_at);
        let absent = "attribute_not_exists(pk) OR #expires_ms <= :now";
        match expect {
            Expect::Absent => {
                let first = item(1);
                check_limits(&[&first])?;
                if self.put_record_if(first, absent, now, None).await? {
                    Ok(1)
                } else {
                    Err(StoreError::Conflict)
                }
            }
            Expect::Version(version) => {
                let next = item(version.saturating_add(1));
                check_limits(&[&next])?;
                let condition = format!("#version = :v AND {LIVE}");
                if self.put_record_if(next, &condition, now, Some(version)).await? {
                    Ok(version + 1)
                } else {
                    Err(StoreError::Conflict)
                }
            }
            Expect::Any => {
                // The item as written at version 1; an update writes the same attributes
                // (its size bounds the update's too).
                let first = item(1);
                check_limits(&[&first])?;
                for _ in 0..ANY_ATTEMPTS {
                    if let Some(version) = self.update_live_record(&first, now).await? {
                        return Ok(version);
                    }
                    if self.put_record_if(first.clone(), absent, now, None).await? {
                        return Ok(1);
                    }
                }
                Err(StoreError::Unavailable(format!(
                    "record {kind}/{scope}/{key} was created and deleted under {ANY_ATTEMPTS} upserts in a row"
                )))
            }
        }
    }

    async fn delete_record(
        &self,
        kind: &str,
        scope: &str,
        key: &str,
        expect: Expect,
        now: Millis,
    ) -> Result<bool, StoreError> {
        check_names(kind, Some(key))?;
        let delete = self.client.delete_item().table_name(&self.table).set_key(Some(record_key(kind, scope, key)));
        match expect {
            Expect::Absent => match self.record(kind, scope, key, now).await? {
                Some(_) => Err(StoreError::Conflict),
                None => Ok(false),
            },
            Expect::Any => {
                let deleted = delete.return_values(ReturnValue::AllOld).send().await.map_err(unavailable)?;
                let old = deleted.attributes().cloned();
                self.meter.write(old.as_ref().map_or(0, codec::item_size));
                // A lapsed item is deleted too, but it was absent already.
                Ok(match old {
                    Some(old) => decode(kind, scope, &old, now)?.is_some(),
                    None => false,
                })
            }
            Expect::Version(version) => {
                let deleted = delete
                    .condition_expression(format!("#version = :v AND {LIVE}"))
                    .expression_attribute_names("#version", "version")
                    .expression_attribute_names("#expires_ms", "expires_at_ms")
                    .expression_attribute_values(":v", n(version))
                    .expression_attribute_values(":now", n(now))
                    .send()
                    .await;
                let deleted = written_unless_condition_failed(deleted)?;
                self.meter.write(0);
                deleted.map(|_| true).ok_or(StoreError::Conflict)
            }
        }
    }

    async fn records(
        &self,
        kind: &str,
        scope: &str,
        after: Option<&str>,
        limit: usize,
        now: Millis,
    ) -> Result<Vec<Record>, StoreError> {
        check_names(kind, None)?;
        let mut records = Vec::new();
        if limit == 0 {
            return Ok(records);
        }
        // No key is empty, so every key sorts after "" (and a key condition cannot hold one).
        let after = after.filter(|after| !after.is_empty());
        let mut query = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression(if after.is_some() { "pk = :pk AND sk > :after" } else { "pk = :pk" })
            .expression_attribute_values(":pk", s(keys::record_pk(kind, scope)))
            .scan_index_forward(true)
            .consistent_read(true)
            // Lapsed items are skipped here rather than by a filter, which DynamoDB would
            // bill the same; a page may hold some, so a listing may take another page.
            .limit(i32::try_from(limit).unwrap_or(i32::MAX).min(1000));
        if let Some(after) = after {
            query = query.expression_attribute_values(":after", s(keys::record_sk(after)));
        }
        self.visit_query(query, |item| {
            if let Some(record) = decode(kind, scope, item, now)? {
                records.push(record);
            }
            Ok(records.len() >= limit)
        })
        .await?;
        Ok(records)
    }
}
