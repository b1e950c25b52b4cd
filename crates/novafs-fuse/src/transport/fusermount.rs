//! Mounting without root: fusermount3 (set-user-ID root) opens /dev/fuse,
//! mounts it, and passes the descriptor back over the socket named by
//! `_FUSE_COMMFD` as SCM_RIGHTS ancillary data, as libfuse does.

use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::socket::{recvmsg, socketpair, AddressFamily, ControlMessageOwned, MsgFlags, SockFlag, SockType};

const FUSERMOUNT: &str = "fusermount3";

/// Mounts through fusermount3 with `options` (comma-separated, as for
/// `mount -o`); returns the connection's /dev/fuse descriptor.
pub(crate) fn mount(mountpoint: &Path, options: &str) -> io::Result<OwnedFd> {
    let (ours, theirs) = socketpair(AddressFamily::Unix, SockType::Stream, None, SockFlag::empty())?;
    // Only fusermount3's end is inherited.
    fcntl(&ours, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    let mut child = Command::new(FUSERMOUNT)
        .arg("-o")
        .arg(options)
        .arg("--")
        .arg(mountpoint)
        .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
        .stdin(Stdio::null())
        .spawn()?;
    drop(theirs);
    let received = receive_fd(&ours);
    let status = child.wait()?;
    match received {
        Ok(Some(fd)) if status.success() => Ok(fd),
        Ok(_) => Err(io::Error::other(format!("{FUSERMOUNT} failed ({status})"))),
        Err(e) => Err(e),
    }
}

/// Unmounts lazily through fusermount3 (the way back for a mount it made).
pub(crate) fn unmount(mountpoint: &Path) -> io::Result<()> {
    let status = Command::new(FUSERMOUNT)
        .args(["-u", "-z", "--"])
        .arg(mountpoint)
        .stdin(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("{FUSERMOUNT} -u failed ({status})")))
    }
}

/// Receives the descriptor fusermount3 sends; `None` if it sent none
/// (it failed and closed its end).
fn receive_fd(socket: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let msg = loop {
        match recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other?,
        }
    };
    let mut received = None;
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            for fd in fds {
                // SAFETY: SCM_RIGHTS installed `fd` in this process just
                // now; nothing else owns it.
                let owned = unsafe { OwnedFd::from_raw_fd(fd) };
                received.get_or_insert(owned);
            }
        }
    }
    Ok(received)
}
