// Connects to nothing: proves the installed headers and library link and run.
#include <collectived/client.h>

#include <cstdio>

int main() {
  std::unique_ptr<collectived::Client> client;
  collectived::Status s = collectived::Client::Connect({.socket_path = ""}, &client);
  std::printf("%s\n", s.ToString().c_str());
  return s.code() == collectived::StatusCode::kInvalidArgument ? 0 : 1;
}
