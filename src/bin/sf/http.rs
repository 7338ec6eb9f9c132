//! The HTTP side of `sf exporter --listen`: one thread, non-blocking sockets under poll(2).
//!
//! A client costs a file descriptor and a small buffer, never a thread or a turn: an idle
//! or slow one (a byte a second) cannot hold up the others, each request has a deadline
//! for its whole head and one for its whole response, and at most `MAX_CONNECTIONS` are
//! held, a new one pushing out the oldest still sending its head. Requests are answered
//! one at a time as their heads complete, as the scrapes must be anyway (they share the
//! exporter's state). No crate fits: tiny_http spawns a thread per open connection and has
//! no deadline for a request's head, hyper brings an async runtime to serve one path.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Connections held at once: Prometheus needs one, a few more for people and probes.
const MAX_CONNECTIONS: usize = 64;
/// From accept to the end of the request's head.
const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// From the head's end to the last byte of the response written.
const RESPONSE_DEADLINE: Duration = Duration::from_secs(10);
/// The largest request head read; a longer one is answered as it stands.
const REQUEST_MAX_BYTES: usize = 16 << 10;

/// What the handler sees of a request.
pub struct Request<'a> {
    pub method: &'a str,
    /// Without the query string.
    pub path: &'a str,
    /// The Accept header's value, empty when absent.
    pub accept: &'a str,
}

pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

struct Connection {
    stream: TcpStream,
    /// The head read so far while reading; the response's unwritten bytes while writing.
    bytes: Vec<u8>,
    writing: bool,
    deadline: Instant,
}

/// Serves `listener` until poll(2) itself fails: each request's answer comes from
/// `answer`, and every response closes its connection.
pub fn serve(listener: TcpListener, mut answer: impl FnMut(&Request) -> Response) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    // Oldest first.
    let mut connections: VecDeque<Connection> = VecDeque::new();
    loop {
        let now = Instant::now();
        connections.retain(|c| c.deadline > now);
        let mut fds = vec![libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        fds.extend(connections.iter().map(|c| libc::pollfd {
            fd: c.stream.as_raw_fd(),
            events: if c.writing { libc::POLLOUT } else { libc::POLLIN },
            revents: 0,
        }));
        let wait = connections.iter().map(|c| c.deadline - now).min();
        // Rounded up, so that a deadline a fraction of a millisecond away is not polled for
        // in a busy loop.
        let timeout_ms = wait.map_or(-1, |w| w.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32);
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures, alive for the call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // Back to front, so that removing one leaves the indexes still to visit in place.
        for i in (0..connections.len()).rev() {
            if fds[i + 1].revents == 0 {
                continue;
            }
            if !advance(&mut connections[i], &mut answer) {
                connections.remove(i);
            }
        }
        if fds[0].revents != 0 {
            accept_all(&listener, &mut connections);
        }
    }
}

/// Takes every pending connection, making room by closing the oldest that has not yet
/// sent its whole request.
fn accept_all(listener: &TcpListener, connections: &mut VecDeque<Connection>) {
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                // Out of descriptors (other processes', or a low limit): a held one goes,
                // else the listener would stay ready and the loop spin.
                if !push_out_oldest(connections) {
                    // None of ours to free: wait for other processes to close some.
                    std::thread::sleep(Duration::from_millis(100));
                    return;
                }
                continue;
            }
            // A client that gave up before its turn (ECONNABORTED) and the like: the
            // next poll says whether more wait.
            Err(_) => return,
        };
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        if connections.len() >= MAX_CONNECTIONS {
            push_out_oldest(connections);
        }
        connections.push_back(Connection {
            stream,
            bytes: Vec::new(),
            writing: false,
            deadline: Instant::now() + REQUEST_DEADLINE,
        });
    }
}

/// Closes the oldest connection still reading its request, else the oldest; false when
/// none is held.
fn push_out_oldest(connections: &mut VecDeque<Connection>) -> bool {
    let oldest = connections.iter().position(|c| !c.writing).unwrap_or(0);
    connections.remove(oldest).is_some()
}

/// Reads or writes what the socket takes now; false once the connection is done with
/// (answered, closed by the client, or failed).
fn advance(connection: &mut Connection, answer: &mut impl FnMut(&Request) -> Response) -> bool {
    if !connection.writing {
        let mut buf = [0u8; 2048];
        loop {
            match connection.stream.read(&mut buf) {
                Ok(0) => return false,
                Ok(n) => connection.bytes.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
            if head_complete(&connection.bytes) {
                break;
            }
        }
        if !head_complete(&connection.bytes) {
            return true;
        }
        connection.bytes = respond(&connection.bytes, answer);
        connection.writing = true;
        connection.deadline = Instant::now() + RESPONSE_DEADLINE;
    }
    loop {
        match connection.stream.write(&connection.bytes) {
            Ok(0) => return false,
            Ok(n) => {
                connection.bytes.drain(..n);
                if connection.bytes.is_empty() {
                    let _ = connection.stream.shutdown(std::net::Shutdown::Write);
                    return false;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
}

fn head_complete(bytes: &[u8]) -> bool {
    bytes.len() >= REQUEST_MAX_BYTES || bytes.windows(4).any(|w| w == b"\r\n\r\n")
}

/// The whole response to a request head, as bytes to write.
fn respond(head: &[u8], answer: &mut impl FnMut(&Request) -> Response) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.lines();
    let mut request = lines.next().unwrap_or_default().split_whitespace();
    let method = request.next().unwrap_or_default();
    let path = request.next().unwrap_or_default();
    let accept = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("accept"))
        .map_or("", |(_, v)| v.trim());
    let path = path.split('?').next().unwrap_or_default();
    let response = answer(&Request { method, path, accept });
    let reason = match response.status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "",
    };
    let mut bytes = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        response.status,
        response.content_type,
        response.body.len()
    )
    .into_bytes();
    bytes.extend_from_slice(response.body.as_bytes());
    bytes
}
