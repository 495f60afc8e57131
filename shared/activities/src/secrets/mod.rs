//! The embedded host's secret resolvers ([`trellis_core::secrets::SecretResolver`]) and the
//! `conformance.secret.echo` node that proves resolution without revealing a value.
//!
//! - [`env`]: `TRELLIS_SECRET_<NAME>` environment variables, read once at start, for the runs
//!   of the tenants the host names only ([`EnvSecrets`]);
//! - [`file`]: a JSON secrets file that only its owner may read (mode `0600` or stricter),
//!   whose entries may be restricted to some tenants ([`FileSecrets`]);
//! - [`SecretChain`]: several resolvers, asked in order (the file first, then the environment,
//!   as the CLI composes them);
//! - [`echo`]: `conformance.secret.echo` ([`SecretEchoActivity`]), which hosts register only
//!   when they run conformance (it reveals the hash and length of any secret a tenant reaches).
//!
//! None of them logs a value, and none keeps a resolved [`Secret`] past the call asking.

pub mod echo;
pub mod env;
pub mod file;

use std::sync::Arc;

use async_trait::async_trait;
use trellis_core::secrets::{Secret, SecretError, SecretRequest, SecretResolver};

pub use echo::SecretEchoActivity;
pub use env::EnvSecrets;
pub use file::{FileSecrets, FileSecretsError};

/// Resolvers asked in order: the first that knows the reference answers (a
/// [`SecretError::NotFound`] passes to the next; any other error is the answer).
#[derive(Debug, Clone)]
pub struct SecretChain {
    resolvers: Vec<Arc<dyn SecretResolver>>,
}

impl SecretChain {
    /// A chain of `resolvers`, asked in this order.
    pub fn new(resolvers: Vec<Arc<dyn SecretResolver>>) -> Self {
        Self { resolvers }
    }

    /// The one resolver a host with `resolvers` uses: `None` for none, the resolver itself
    /// for one, a chain for more.
    pub fn compose(mut resolvers: Vec<Arc<dyn SecretResolver>>) -> Option<Arc<dyn SecretResolver>> {
        match resolvers.len() {
            0 => None,
            1 => resolvers.pop(),
            _ => Some(Arc::new(Self::new(resolvers))),
        }
    }
}

#[async_trait]
impl SecretResolver for SecretChain {
    async fn resolve(&self, request: SecretRequest<'_>) -> Result<Secret, SecretError> {
        for resolver in &self.resolvers {
            match resolver.resolve(request).await {
                Err(SecretError::NotFound { .. }) => continue,
                answer => return answer,
            }
        }
        Err(SecretError::NotFound { reference: request.reference.to_owned() })
    }

    fn backend(&self) -> &'static str {
        "chain"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_chain_asks_in_order_and_passes_only_not_found_on() {
        let first: Arc<dyn SecretResolver> =
            Arc::new(EnvSecrets::from_vars(&["t"], [("TRELLIS_SECRET_A", "from-first")]));
        let second: Arc<dyn SecretResolver> = Arc::new(EnvSecrets::from_vars(
            &["t"],
            [("TRELLIS_SECRET_A", "shadowed"), ("TRELLIS_SECRET_B", "from-second")],
        ));
        let chain = SecretChain::compose(vec![first, second]).unwrap();
        let ask = |reference| SecretRequest { tenant: "t", reference };
        assert_eq!(chain.resolve(ask("a")).await.unwrap().expose(), b"from-first");
        assert_eq!(chain.resolve(ask("b")).await.unwrap().expose(), b"from-second");
        assert_eq!(chain.resolve(ask("c")).await.unwrap_err().code(), "credential_not_found");
        assert!(SecretChain::compose(Vec::new()).is_none());
    }
}
