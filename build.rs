//! Link settings for libstagefrontier.so.

fn main() {
    // The library runs a collector thread and registers atexit and atfork handlers, so it
    // must never be unmapped: dlclose of a loader that opened it becomes a no-op.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    // Resolve our own symbols at load, not lazily inside a hook on the hot path.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,now");
}
