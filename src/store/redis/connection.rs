//! The store's connection: one server's, or a cluster's, and how a store
//! is made over one (Redis's version checked first). Both multiplex
//! concurrent scripts and reconnect on their own; a handle is cloned for
//! each round trip.

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::{
    DEFAULT_DEADLINE, DEFAULT_IDLE_TTL, DEFAULT_RECHECK, Health, RedisStore, StoreSettings,
    WhenUnavailable, scripts,
};

/// Making a store.
impl RedisStore {
    /// Connects to the Redis server at `url` (`redis://host:port/db`, or
    /// `rediss://` with TLS where the redis crate has it), keeping every
    /// key's rate under `prefix` (`prefix:key`). Processes that share a
    /// prefix share their rates; use one prefix per fleet and purpose.
    ///
    /// The connection reconnects on its own after Redis goes away.
    ///
    /// # Errors
    ///
    /// [`ConnectError`] when the URL is not a Redis URL, the prefix is
    /// empty, the server cannot be reached within a second, or it is older
    /// than Redis 5 (field `"connection"`).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropped before it resolves, no store exists and the
    /// connection attempt is abandoned.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, ConnectError> {
        check_prefix(prefix)?;
        let client = redis::Client::open(url).map_err(|error| {
            ConnectError::new("url", format!("{url:?} is not a Redis URL"), Some(error))
        })?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(1)))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let connection = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(|error| {
                ConnectError::new(
                    "url",
                    format!("no Redis server answered at {url}"),
                    Some(error),
                )
            })?;
        Self::over(Connection::Server(connection), prefix).await
    }

    /// A store over a connection the application already has (its
    /// reconnect and timeout settings, its TLS, a Sentinel-resolved
    /// master), keeping every key's rate under `prefix` as
    /// [`connect`](Self::connect) does.
    ///
    /// # Errors
    ///
    /// [`ConnectError`] when the prefix is empty, or the server does not
    /// answer `INFO` or is older than Redis 5 (field `"connection"`).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropped before it resolves, no store exists.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use portcullis::store::RedisStore;
    ///
    /// let client = redis::Client::open("redis://127.0.0.1/")?;
    /// let connection = redis::aio::ConnectionManager::new(client).await?;
    /// let store = RedisStore::with_connection(connection.clone(), "api").await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_connection(
        connection: ConnectionManager,
        prefix: &str,
    ) -> Result<Self, ConnectError> {
        Self::over(Connection::Server(connection), prefix).await
    }

    /// Connects to the Redis Cluster that `nodes` belong to (`redis://`
    /// URLs of one or more of its nodes), keeping every key's rate under
    /// `prefix`. Each script touches one Redis key, so it runs on the node
    /// that holds its slot; a node that fails takes its keys to the local
    /// fallback until the cluster answers for them again.
    ///
    /// # Errors
    ///
    /// [`ConnectError`] when a URL is not a Redis URL, the prefix is empty,
    /// the cluster cannot be reached (field `"nodes"`), or a node is older
    /// than Redis 5 (field `"connection"`).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropped before it resolves, no store exists.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), portcullis::store::ConnectError> {
    /// use portcullis::store::RedisStore;
    ///
    /// let nodes = ["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/"];
    /// let store = RedisStore::connect_cluster(&nodes, "crawler").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_cluster(nodes: &[&str], prefix: &str) -> Result<Self, ConnectError> {
        check_prefix(prefix)?;
        let client = redis::cluster::ClusterClient::builder(nodes.iter().copied())
            .connection_timeout(Duration::from_secs(1))
            .response_timeout(Duration::from_secs(1))
            .retries(1)
            .build()
            .map_err(|error| {
                ConnectError::new(
                    "nodes",
                    format!("{nodes:?} are not Redis URLs"),
                    Some(error),
                )
            })?;
        let connection = client.get_async_connection().await.map_err(|error| {
            ConnectError::new(
                "nodes",
                format!("no Redis Cluster answered at {nodes:?}"),
                Some(error),
            )
        })?;
        Self::over(Connection::Cluster(connection), prefix).await
    }

    /// A store over a cluster connection the application already has.
    ///
    /// # Errors
    ///
    /// [`ConnectError`] when the prefix is empty, or a node does not answer
    /// `INFO` or is older than Redis 5 (field `"connection"`).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropped before it resolves, no store exists.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// use portcullis::store::RedisStore;
    ///
    /// let client = redis::cluster::ClusterClient::new(vec!["redis://10.0.0.1:7000/"])?;
    /// let connection = client.get_async_connection().await?;
    /// let store = RedisStore::with_cluster_connection(connection.clone(), "api").await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_cluster_connection(
        connection: ClusterConnection,
        prefix: &str,
    ) -> Result<Self, ConnectError> {
        Self::over(Connection::Cluster(connection), prefix).await
    }

    /// A store over `connection`, once Redis has said it is recent enough.
    async fn over(mut connection: Connection, prefix: &str) -> Result<Self, ConnectError> {
        check_prefix(prefix)?;
        let info: redis::Value = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut connection)
            .await
            .map_err(|error| {
                ConnectError::new("connection", "Redis did not answer INFO", Some(error))
            })?;
        match lowest_version(&text_of(&info)) {
            Some(version) if version >= MIN_VERSION => {}
            found => {
                let found = found.map_or("an unknown version".to_owned(), |(major, minor)| {
                    format!("Redis {major}.{minor}")
                });
                return Err(ConnectError::new(
                    "connection",
                    format!(
                        "{found} is too old: the scripts need Redis {}.{} or later \
                         (they write after reading TIME, which needs script effects replication)",
                        MIN_VERSION.0, MIN_VERSION.1
                    ),
                    None,
                ));
            }
        }
        Ok(Self {
            connection,
            prefix: prefix.to_owned(),
            settings: StoreSettings {
                deadline: DEFAULT_DEADLINE,
                when_unavailable: WhenUnavailable::default(),
                recheck_every: DEFAULT_RECHECK,
                idle_ttl: DEFAULT_IDLE_TTL,
            },
            scripts: scripts::Scripts::new(),
            health: Health::default(),
        })
    }
}

/// Why [`RedisStore::connect`] failed: the setting at fault and what was
/// wrong with it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use portcullis::store::RedisStore;
///
/// let error = RedisStore::connect("http://example.com/", "api").await.unwrap_err();
/// assert_eq!(error.field(), "url");
/// let error = RedisStore::connect("redis://127.0.0.1/", "").await.unwrap_err();
/// assert_eq!(error.field(), "prefix");
/// # }
/// ```
#[derive(Debug)]
pub struct ConnectError {
    field: &'static str,
    message: String,
    source: Option<redis::RedisError>,
}

impl ConnectError {
    fn new(
        field: &'static str,
        message: impl Into<String>,
        source: Option<redis::RedisError>,
    ) -> Self {
        Self {
            field,
            message: message.into(),
            source,
        }
    }

    /// What is at fault: `"url"`, `"nodes"` (a cluster's), `"prefix"`, or
    /// `"connection"` (Redis answered, but not as the store needs: too old,
    /// or no `INFO`).
    pub fn field(&self) -> &'static str {
        self.field
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)?;
        if let Some(source) = &self.source {
            write!(f, " ({source})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}

/// A prefix is needed: without one the keys of every fleet would mix.
fn check_prefix(prefix: &str) -> Result<(), ConnectError> {
    if prefix.is_empty() {
        return Err(ConnectError::new(
            "prefix",
            "must not be empty (keys of every fleet would mix)",
            None,
        ));
    }
    Ok(())
}

/// Where the store's scripts go.
#[derive(Clone)]
pub(super) enum Connection {
    /// One server (or a proxy in front of several).
    Server(ConnectionManager),
    /// Redis Cluster: each script touches one key, so it runs on the node
    /// that holds that key's slot.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Server(connection) => connection.req_packed_command(cmd),
            Self::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Server(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Server(connection) => connection.get_db(),
            Self::Cluster(connection) => connection.get_db(),
        }
    }
}

/// The oldest Redis the scripts run on: they write after reading `TIME`,
/// which needs script effects replication, the default from Redis 5.
pub(super) const MIN_VERSION: (u32, u32) = (5, 0);

/// The lowest `redis_version` in the text of one or more `INFO server`
/// answers (a cluster answers for each node); `None` if there is none.
pub(super) fn lowest_version(info: &str) -> Option<(u32, u32)> {
    info.lines()
        .filter_map(|line| line.trim().strip_prefix("redis_version:"))
        .filter_map(|version| {
            let mut parts = version.split('.').map(|part| part.parse::<u32>().ok());
            Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
        })
        .min()
}

/// Every string in an answer, joined: `INFO` from one server is one
/// string, from a cluster a map of node to string.
pub(super) fn text_of(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) | Value::VerbatimString { text, .. } => text.clone(),
        Value::Array(values) | Value::Set(values) => values.iter().map(text_of).collect(),
        Value::Map(pairs) => pairs
            .iter()
            .map(|(key, value)| text_of(key) + "\n" + &text_of(value))
            .collect(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_version_of_every_node_is_read() {
        let one = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n";
        assert_eq!(lowest_version(one), Some((7, 0)));
        let cluster = format!("{one}# Server\r\nredis_version:4.0.9\r\n");
        assert_eq!(lowest_version(&cluster), Some((4, 0)));
        assert_eq!(lowest_version("redis_version:6\r\n"), Some((6, 0)));
        assert_eq!(lowest_version("# Server\r\n"), None);
        assert_eq!(lowest_version("redis_version:x.y\r\n"), None);
    }

    #[test]
    fn the_text_of_a_cluster_answer_holds_every_node() {
        let map = Value::Map(vec![
            (
                Value::SimpleString("a:1".into()),
                Value::BulkString(b"redis_version:7.2.4\r\n".to_vec()),
            ),
            (
                Value::SimpleString("b:2".into()),
                Value::VerbatimString {
                    format: redis::VerbatimFormat::Text,
                    text: "redis_version:5.0.0\r\n".into(),
                },
            ),
        ]);
        assert_eq!(lowest_version(&text_of(&map)), Some((5, 0)));
    }
}
