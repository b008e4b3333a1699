//! The one `redis` client of a handle, built from the URL and the TLS
//! options, so that every connection of the handle uses the same settings
//! (SPEC 7, TLS).

use super::RedisOptions;
use super::connection::Source;
use super::options::Pem;
use crate::error::{Error, Result};

/// What a failed connect was, for the error: naming TLS points at
/// certificates when the source says the handshake failed.
pub(super) fn connect_what(client: &Source) -> &'static str {
    if client.is_tls() {
        "connect over TLS"
    } else {
        "connect"
    }
}

/// Load a PEM that must hold at least one certificate. redis-rs would take
/// text without any as an empty trust store (or an empty chain) and fail
/// only at the handshake, as if the server were at fault.
fn certificates(pem: &Pem, what: &str) -> Result<Vec<u8>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let bytes = pem.load(what)?;
    let mut n = 0usize;
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        cert.map_err(|e| Error::invalid(format!("the {what} PEM is not valid: {e}")))?;
        n += 1;
    }
    if n == 0 {
        return Err(Error::invalid(format!(
            "the {what} PEM holds no CERTIFICATE block ({pem:?})"
        )));
    }
    Ok(bytes)
}

/// The one client every connection of a handle comes from (the managed
/// connection, its reconnects and the blocking-wait connections), so all of
/// them use the same TLS settings.
pub(super) fn client_for(url: &str, options: &RedisOptions) -> Result<Source> {
    use redis::IntoConnectionInfo;
    // `redis+cluster://` and `rediss+cluster://` ask for a cluster
    // connection; the rest of the URL is an ordinary one.
    let (url, cluster) = match url.split_once("+cluster://") {
        Some((scheme @ ("redis" | "rediss"), rest)) => (format!("{scheme}://{rest}"), true),
        _ => (url.to_string(), options.cluster),
    };
    let open = |info, certs| {
        Source::open(info, certs, cluster)
            .map_err(|e| Error::invalid(format!("redis url is not valid: {e}")))
    };
    // redis-rs names a foreign scheme only by its error kind
    // (`InvalidClientConfig`): say which schemes are spoken.
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    if let Some(scheme) = scheme
        && !matches!(
            scheme.as_str(),
            "redis" | "rediss" | "valkey" | "valkeys" | "unix" | "redis+unix" | "valkey+unix"
        )
    {
        return Err(Error::invalid(format!(
            "redis url has the scheme {scheme}://: expected redis://, rediss:// (TLS), \
             redis+cluster://, rediss+cluster:// or unix://"
        )));
    }
    let info = url
        .as_str()
        .into_connection_info()
        .map_err(|e| Error::invalid(format!("redis url is not valid: {e}")))?;
    let insecure = match info.addr() {
        redis::ConnectionAddr::TcpTls { insecure, .. } => *insecure,
        _ => {
            if options.tls_ca.is_some() || options.tls_client.is_some() {
                // Silently talking plain text to a server the caller meant
                // to reach over TLS would be worse than refusing.
                return Err(Error::invalid(
                    "redis TLS options (CA or client certificate) need a rediss:// url",
                ));
            }
            return open(info, None);
        }
    };
    if insecure {
        return Err(Error::invalid(
            "redis url asks for TLS without certificate checks (#insecure), which is not \
             supported: give the server's CA with RedisOptions::tls_ca_pem or tls_ca_file",
        ));
    }
    // redis-rs asks rustls for its process-wide default crypto provider. Make
    // it ring (the provider this crate builds) unless the application has
    // installed one already, in which case that one stays.
    let _ = rustls::crypto::ring::default_provider().install_default();
    if options.tls_ca.is_none() && options.tls_client.is_none() {
        return open(info, None);
    }
    let root_cert = match &options.tls_ca {
        Some(pem) => Some(certificates(pem, "TLS CA")?),
        None => None,
    };
    let client_tls = match &options.tls_client {
        Some((cert, key)) => Some(redis::ClientTlsConfig {
            client_cert: certificates(cert, "TLS client certificate")?,
            client_key: key.load("TLS client key")?,
        }),
        None => None,
    };
    Source::open(
        info,
        Some(redis::TlsCertificates {
            client_tls,
            root_cert,
        }),
        cluster,
    )
    .map_err(|e| Error::invalid(format!("redis TLS settings are not valid: {e}")))
}
