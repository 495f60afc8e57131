//! Creating the table (tests and first-time setup; the SAM template declares the same
//! table for deployments).

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use trellis_core::StoreError;

use crate::errors::unavailable;
use crate::keys::{PK, RUNS_BY_TENANT, SK};

fn key(name: &str, kind: KeyType) -> KeySchemaElement {
    KeySchemaElement::builder().attribute_name(name).key_type(kind).build().expect("key schema is complete")
}

fn string_attribute(name: &str) -> AttributeDefinition {
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .expect("attribute definition is complete")
}

/// Creates `table` with the Trellis key design unless it exists — string `pk`/`sk`,
/// on-demand billing, the `runs_by_tenant` index, TTL on `expires_at` (runs' items and
/// idempotency records) — and waits until it is active.
pub async fn create_table(client: &Client, table: &str) -> Result<(), StoreError> {
    let index = GlobalSecondaryIndex::builder()
        .index_name(RUNS_BY_TENANT)
        .key_schema(key("gsi1pk", KeyType::Hash))
        .key_schema(key("gsi1sk", KeyType::Range))
        .projection(Projection::builder().projection_type(ProjectionType::All).build())
        .build()
        .expect("index is complete");
    let created = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key(PK, KeyType::Hash))
        .key_schema(key(SK, KeyType::Range))
        .attribute_definitions(string_attribute(PK))
        .attribute_definitions(string_attribute(SK))
        .attribute_definitions(string_attribute("gsi1pk"))
        .attribute_definitions(string_attribute("gsi1sk"))
        .global_secondary_indexes(index)
        .send()
        .await;
    if let Err(error) = created {
        let exists = error.as_service_error().is_some_and(|e| e.is_resource_in_use_exception());
        if !exists {
            return Err(unavailable(error));
        }
    }
    let ttl = aws_sdk_dynamodb::types::TimeToLiveSpecification::builder()
        .attribute_name("expires_at")
        .enabled(true)
        .build()
        .expect("ttl specification is complete");
    let _ = client.update_time_to_live().table_name(table).time_to_live_specification(ttl).send().await;
    for _ in 0..100 {
        let described = client.describe_table().table_name(table).send().await.map_err(unavailable)?;
        let active = described
            .table()
            .and_then(|t| t.table_status())
            .is_some_and(|status| *status == aws_sdk_dynamodb::types::TableStatus::Active);
        if active {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(StoreError::Unavailable(format!("table {table} did not become active")))
}
