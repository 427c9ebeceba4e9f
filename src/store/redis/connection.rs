//! The store's connection: one server's, or a cluster's. Both multiplex
//! concurrent scripts and reconnect on their own; a handle is cloned for
//! each round trip.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

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
