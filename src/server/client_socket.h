#pragma once
// Whether the client of a request is still connected, for a response that is written only at its end (a
// non-streamed completion): a streamed one learns it from a failed write, this one has nothing to write
// until the sequence is done. httplib hands a handler the connection's addresses but not its socket, so
// the socket is found by them.

#include <string>

namespace moe::server {

class ClientSocket {
 public:
  // The connection from remote_addr:remote_port to local_port (httplib::Request's fields); a socket that
  // cannot be found reads as connected.
  ClientSocket(const std::string& remote_addr, int remote_port, int local_port);

  // True once the client has closed or reset its side of the connection.
  bool closed() const;

 private:
  int fd_ = -1;
};

}  // namespace moe::server
