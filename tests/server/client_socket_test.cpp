// ClientSocket finds a request's connection by its addresses and sees the client close it.
#include "client_socket.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace moe::server {
namespace {

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

int port_of(int fd) {
  sockaddr_in a{};
  socklen_t size = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &size);
  return ntohs(a.sin_port);
}

TEST(ClientSocket, SeesTheClientClose) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in any = loopback(0);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&any), sizeof(any)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  const int server_port = port_of(listener);
  // Two clients: the one watched, and another that stays connected beside it.
  int clients[2], accepted[2];
  for (int i = 0; i < 2; ++i) {
    clients[i] = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to = loopback(server_port);
    ASSERT_EQ(connect(clients[i], reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    accepted[i] = accept(listener, nullptr, nullptr);
    ASSERT_GE(accepted[i], 0);
  }
  const ClientSocket watched("127.0.0.1", port_of(clients[0]), server_port);
  const ClientSocket other("127.0.0.1", port_of(clients[1]), server_port);
  EXPECT_FALSE(watched.closed());
  ASSERT_EQ(write(clients[0], "x", 1), 1);  // a byte waiting to be read is not a close
  EXPECT_FALSE(watched.closed());
  close(clients[0]);
  for (int i = 0; i < 100 && !watched.closed(); ++i) usleep(1000);
  EXPECT_TRUE(watched.closed());
  EXPECT_FALSE(other.closed());
  // A connection that is not there reads as open: nothing to cancel on a guess.
  EXPECT_FALSE(ClientSocket("127.0.0.1", 1, 1).closed());
  for (int fd : {clients[1], accepted[0], accepted[1], listener}) close(fd);
}

}  // namespace
}  // namespace moe::server
