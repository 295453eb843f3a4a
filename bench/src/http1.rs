//! The load's own HTTP/1.1 connections: keep-alive TCP connections to a plain `http://` target,
//! each sending one request at a time and reading its whole answer before the next.
//!
//! Over HTTP the bench shares the machine with the server it measures, so every microsecond
//! its clients spend is one the server does not get. A general client (`reqwest` through
//! `client::Client`) parses a URL, builds headers, checks its pool and decodes JSON into a
//! value for every request; here a decision's request is a few bytes put together from parts
//! made once, and an answer is read with `httparse` and nothing more. The setup and the
//! checks after the run still go through `client::Client`.
//!
//! Only what a quota server answers is read: a head, then a body of `Content-Length` bytes (an
//! answer without one, or with a transfer coding, is refused as unexpected rather than
//! guessed at). Every read is bounded ([`MAX_HEAD_BYTES`], [`MAX_BODY_BYTES`]) and so is every
//! exchange ([`EXCHANGE_TIMEOUT`]).

use std::sync::Mutex;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The longest answer head read: a quota server's are a few hundred bytes.
pub(crate) const MAX_HEAD_BYTES: usize = 16 * 1024;
/// The longest answer body read: a reservation or a problem is well under a kilobyte.
pub(crate) const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Headers an answer may carry.
const MAX_HEADERS: usize = 32;
/// How long one request may take, answer included (as `client::Client`'s).
pub(crate) const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Room a connection's read buffer starts with: one answer's head and body.
const READ_BUFFER_BYTES: usize = 4096;
const _: () = assert!(READ_BUFFER_BYTES <= MAX_HEAD_BYTES);

/// A plain-HTTP target: where to connect, and the header lines every request carries.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// `host:port`, as given (resolved at each connect).
    authority: String,
    /// The base URL's path, without a trailing slash (`""` for most servers).
    prefix: String,
    /// `Host: …\r\n` and, with a token, `Authorization: Bearer …\r\n`.
    common_headers: String,
}

impl Target {
    /// The target of `base` (`http://host[:port][/prefix]`), with `token` sent as a bearer token
    /// (an empty token counts as none, as for `client::Client`).
    pub(crate) fn parse(base: &str, token: Option<&str>) -> Result<Target, String> {
        let rest = base.strip_prefix("http://").ok_or_else(|| {
            format!("--target {base}: the load speaks plain http:// (no TLS) to its server")
        })?;
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let visible = |s: &str| s.bytes().all(|b| b.is_ascii_graphic());
        if authority.is_empty() || !visible(authority) || !visible(path) {
            return Err(format!(
                "--target {base}: expected http://HOST[:PORT][/PATH] in visible ASCII"
            ));
        }
        let authority = if authority.contains(':') && !authority.ends_with(']') {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        let mut common_headers = format!("Host: {authority}\r\n");
        if let Some(token) = token.filter(|t| !t.is_empty()) {
            if !visible(token) {
                return Err("--token: a token is printable ASCII without spaces".into());
            }
            common_headers.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        Ok(Target {
            authority,
            prefix: path.trim_end_matches('/').to_owned(),
            common_headers,
        })
    }

    /// A request's bytes: `method` on the base's path followed by `path`, with `json` as its
    /// body (and its content type), or no body.
    pub(crate) fn request(&self, method: &str, path: &str, json: Option<&[u8]>) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(256 + json.map_or(0, <[u8]>::len));
        bytes.extend_from_slice(method.as_bytes());
        bytes.push(b' ');
        bytes.extend_from_slice(self.prefix.as_bytes());
        bytes.extend_from_slice(path.as_bytes());
        bytes.extend_from_slice(b" HTTP/1.1\r\n");
        bytes.extend_from_slice(self.common_headers.as_bytes());
        match json {
            Some(body) => {
                bytes.extend_from_slice(b"Content-Type: application/json\r\nContent-Length: ");
                bytes.extend_from_slice(body.len().to_string().as_bytes());
                bytes.extend_from_slice(b"\r\n\r\n");
                bytes.extend_from_slice(body);
            }
            None => bytes.extend_from_slice(b"Content-Length: 0\r\n\r\n"),
        }
        bytes
    }
}

/// An answer: its status and its body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

/// One keep-alive connection.
struct Connection {
    stream: TcpStream,
    /// Bytes read and not yet consumed by an answer.
    read: Vec<u8>,
}

impl Connection {
    async fn open(target: &Target) -> Result<Connection, String> {
        let stream = TcpStream::connect(&target.authority)
            .await
            .map_err(|e| format!("connecting to {}: {e}", target.authority))?;
        // One write a request: nothing for Nagle's algorithm to hold back but the wait itself.
        stream
            .set_nodelay(true)
            .map_err(|e| format!("TCP_NODELAY: {e}"))?;
        Ok(Connection {
            stream,
            read: Vec::with_capacity(READ_BUFFER_BYTES),
        })
    }

    /// Sends `request` and reads its answer; also says whether the connection may be used
    /// again (the server did not ask to close it).
    async fn exchange(&mut self, request: &[u8]) -> Result<(Answer, bool), String> {
        self.stream
            .write_all(request)
            .await
            .map_err(|e| format!("sending: {e}"))?;
        let head = loop {
            if let Some(head) = parse_head(&self.read)? {
                break head;
            }
            if self.read.len() >= MAX_HEAD_BYTES {
                return Err(format!("an answer's head is over {MAX_HEAD_BYTES} bytes"));
            }
            self.fill().await?;
        };
        let end = head.length + head.content_length;
        while self.read.len() < end {
            self.fill().await?;
        }
        let body = self.read[head.length..end].to_vec();
        self.read.drain(..end);
        let answer = Answer {
            status: head.status,
            body,
        };
        Ok((answer, !head.close))
    }

    async fn fill(&mut self) -> Result<(), String> {
        self.read.reserve(READ_BUFFER_BYTES);
        match self.stream.read_buf(&mut self.read).await {
            Ok(0) => Err("the server closed the connection mid-answer".into()),
            Ok(_) => Ok(()),
            Err(e) => Err(format!("reading: {e}")),
        }
    }
}

/// What the load needs of an answer's head.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    status: u16,
    /// The head's length in bytes, blank line included.
    length: usize,
    content_length: usize,
    /// `Connection: close`: the server closes the connection after this answer.
    close: bool,
}

/// The head at the start of `bytes`, or `None` while it is incomplete.
fn parse_head(bytes: &[u8]) -> Result<Option<Head>, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let length = match response.parse(bytes) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("an answer's head does not parse: {e}")),
    };
    let status = response.code.ok_or("an answer without a status")?;
    let mut content_length = None;
    let mut close = response.version == Some(0);
    for header in response.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            let value = std::str::from_utf8(header.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or("an answer's Content-Length is not a number")?;
            if content_length.is_some_and(|known| known != value) {
                return Err("an answer with two Content-Lengths".into());
            }
            content_length = Some(value);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(
                "an answer with a Transfer-Encoding (the load reads Content-Length)".into(),
            );
        } else if header.name.eq_ignore_ascii_case("connection") {
            close |= header.value.eq_ignore_ascii_case(b"close");
        }
    }
    // 1xx, 204 and 304 answers have no body; every other answer of a quota server says its length.
    let bodiless = status < 200 || status == 204 || status == 304;
    let content_length = match content_length {
        Some(n) if n > MAX_BODY_BYTES => {
            return Err(format!("an answer's body is over {MAX_BODY_BYTES} bytes"))
        }
        Some(n) => n,
        None if bodiless => 0,
        None => return Err(format!("a {status} answer without a Content-Length")),
    };
    Ok(Some(Head {
        status,
        length,
        content_length,
        close,
    }))
}

/// Keep-alive connections to one target, shared by the load's clients: a client takes one
/// (or opens one) for an exchange and gives it back after, unless it failed or is closing.
pub(crate) struct Connections {
    target: Target,
    idle: Mutex<Vec<Connection>>,
}

impl Connections {
    pub(crate) fn new(target: Target) -> Connections {
        Connections {
            target,
            idle: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    /// Sends `request` on an idle connection, or a new one, and reads its answer.
    pub(crate) async fn send(&self, request: &[u8]) -> Result<Answer, String> {
        let idle = self.take_idle();
        let exchange = async {
            let mut connection = match idle {
                Some(connection) => connection,
                None => Connection::open(&self.target).await?,
            };
            let (answer, reusable) = connection.exchange(request).await?;
            if reusable {
                self.give_back(connection);
            }
            Ok(answer)
        };
        tokio::time::timeout(EXCHANGE_TIMEOUT, exchange)
            .await
            .map_err(|_| format!("no answer within {} s", EXCHANGE_TIMEOUT.as_secs()))?
    }

    fn take_idle(&self) -> Option<Connection> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    fn give_back(&self, connection: Connection) {
        self.idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(connection);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_take_a_host_a_port_a_prefix_and_a_token() {
        let target = Target::parse("http://127.0.0.1:8080/", Some("s3cret-token-0123")).unwrap();
        assert_eq!(target.authority, "127.0.0.1:8080");
        assert_eq!(target.prefix, "");
        let request = target.request("POST", "/v1/x", Some(b"{}"));
        assert_eq!(
            String::from_utf8(request).unwrap(),
            "POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\
             Authorization: Bearer s3cret-token-0123\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        );
        let target = Target::parse("http://quota/api", Some("")).unwrap();
        assert_eq!(target.authority, "quota:80");
        assert_eq!(
            String::from_utf8(target.request("POST", "/v1/y", None)).unwrap(),
            "POST /api/v1/y HTTP/1.1\r\nHost: quota:80\r\nContent-Length: 0\r\n\r\n"
        );
        assert_eq!(
            Target::parse("http://[::1]:9000", None).unwrap().authority,
            "[::1]:9000"
        );
        assert_eq!(
            Target::parse("http://[::1]", None).unwrap().authority,
            "[::1]:80"
        );
    }

    #[test]
    fn targets_refuse_what_the_load_cannot_speak_or_send() {
        for bad in [
            "https://h:1",
            "h:1",
            "http://",
            "http://h:1/a b",
            "http://h\n:1",
        ] {
            assert!(Target::parse(bad, None).is_err(), "{bad:?}");
        }
        assert!(Target::parse("http://h:1", Some("a b")).is_err());
        assert!(Target::parse("http://h:1", Some("tok\r\nX-Evil: 1")).is_err());
    }

    #[test]
    fn heads_give_the_status_the_length_and_whether_the_server_closes() {
        let answer = b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n\
                       content-length: 7\r\n\r\n{\"a\":1}";
        let head = parse_head(answer).unwrap().unwrap();
        assert_eq!(
            head,
            Head {
                status: 201,
                length: answer.len() - 7,
                content_length: 7,
                close: false
            }
        );
        assert_eq!(parse_head(&answer[..20]).unwrap(), None);
        let closing = b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n";
        let head = parse_head(closing).unwrap().unwrap();
        assert_eq!(
            (head.status, head.content_length, head.close),
            (204, 0, true)
        );
        let old = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert!(parse_head(old).unwrap().unwrap().close);
    }

    #[test]
    fn heads_without_a_length_or_over_a_bound_are_refused() {
        for bad in [
            &b"HTTP/1.1 200 OK\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n",
            b"NOT HTTP\r\n\r\n",
        ] {
            assert!(
                parse_head(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// A server that answers each request after reading its head, in two writes, and closes
    /// after the second: the connection is reused once, then replaced.
    #[tokio::test]
    async fn connections_are_kept_reused_and_replaced_when_closed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let mut accepted = 0;
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                accepted += 1;
                for answer in 1..=2 {
                    let mut head = Vec::new();
                    while !head.ends_with(b"\r\n\r\n") {
                        let mut byte = [0u8];
                        if stream.read(&mut byte).await.unwrap() == 0 {
                            break;
                        }
                        head.push(byte[0]);
                    }
                    let closing = if answer == 2 {
                        "Connection: close\r\n"
                    } else {
                        ""
                    };
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\n{closing}Content-Length: 12\r\n\r\n{{\"conn\":{accepted:>3}}}"
                    );
                    let (first, second) = reply.as_bytes().split_at(20);
                    stream.write_all(first).await.unwrap();
                    stream.flush().await.unwrap();
                    stream.write_all(second).await.unwrap();
                }
                if accepted == 2 {
                    return;
                }
            }
        });
        let target = Target::parse(&format!("http://{address}"), None).unwrap();
        let request = target.request("GET", "/", None);
        let connections = Connections::new(target);
        let mut bodies = Vec::new();
        for _ in 0..4 {
            let answer = connections.send(&request).await.unwrap();
            assert_eq!(answer.status, 200);
            bodies.push(String::from_utf8(answer.body).unwrap());
        }
        assert_eq!(
            bodies,
            [
                "{\"conn\":  1}",
                "{\"conn\":  1}",
                "{\"conn\":  2}",
                "{\"conn\":  2}"
            ]
        );
        server.await.unwrap();
    }
}
